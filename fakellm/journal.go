package fakellm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// ReadJournal reads the JSON lines a Server's journal wrote (one or many
// servers' journals, interleaved) and returns one Record per request, in
// order of arrival in the journal, each as its last line left it.
func ReadJournal(r io.Reader) ([]Record, error) {
	type key struct {
		server string
		seq    int
	}
	var out []Record
	at := map[key]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 2*maxBody)
	for line := 1; sc.Scan(); line++ {
		text := sc.Bytes()
		if len(text) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(text, &rec); err != nil {
			return out, fmt.Errorf("fakellm: journal line %d is not a record: %w", line, err)
		}
		k := key{rec.Server, rec.Seq}
		if i, ok := at[k]; ok {
			out[i] = rec
			continue
		}
		at[k] = len(out)
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("fakellm: read journal: %w", err)
	}
	return out, nil
}
