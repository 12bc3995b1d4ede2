package host

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeFrame holds the hand-written frame decoder to encoding/json:
// it never panics, what it takes encoding/json takes the same way, and
// what appendFrame writes of a frame reads back as that frame. Its corpus
// starts from decodeFrameLines; testdata/fuzz/FuzzDecodeFrame keeps what
// the fuzzer found.
//
//	go test -run XXX -fuzz FuzzDecodeFrame -fuzztime 60s ./host/
func FuzzDecodeFrame(f *testing.F) {
	for _, l := range decodeFrameLines {
		f.Add([]byte(l + "\n"))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var want Frame
		werr := json.Unmarshal(line, &want)
		var got Frame
		if decodeFrame(line, &got) {
			if werr != nil {
				t.Fatalf("decodeFrame took %q, which encoding/json refuses: %v", line, werr)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("decodeFrame(%q) = %+v, encoding/json gives %+v", line, got, want)
			}
		}
		if werr != nil {
			return
		}
		out := appendFrame(nil, &want)
		var back Frame
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("appendFrame(%+v) = %q, which encoding/json refuses: %v", want, out, err)
		}
		if !reflect.DeepEqual(want, back) {
			t.Fatalf("appendFrame(%+v) = %q, which reads back as %+v", want, out, back)
		}
		var fast Frame
		if decodeFrame(out, &fast) && !reflect.DeepEqual(want, fast) {
			t.Fatalf("decodeFrame(appendFrame(%+v)) = %+v", want, fast)
		}
	})
}
