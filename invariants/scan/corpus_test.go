package scan

import (
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var benchKinds = []string{"provider_key", "api_server_key", "env_marker", "model", "memory", "soul", "workdir", "cron_prompt", "shell_state", "env_name"}

// testPatterns mints the canaries of n tenants the way the tenants package
// does: <kind with - for _>-<tenant>-<10 hex>, CANARY_<TENANT>_<TAG> for
// env_name.
func testPatterns(rng *rand.Rand, n int) []Pattern {
	var out []Pattern
	for t := 0; t < n; t++ {
		name := fmt.Sprintf("tenant%d", t)
		if t < len(greek) {
			name = greek[t]
		}
		tag := fmt.Sprintf("%010x", rng.Uint64()&(1<<40-1))
		for _, k := range benchKinds {
			v := strings.ReplaceAll(k, "_", "-") + "-" + name + "-" + tag
			if k == "env_name" {
				v = "CANARY_" + strings.ToUpper(name) + "_" + strings.ToUpper(tag)
			}
			out = append(out, Pattern{Owner: name, Kind: k, Value: v})
		}
	}
	return out
}

var greek = []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}

var words = strings.Fields(`the of and to in is that for it as with was on be by at this are from or
have an they which one you were her all she there would their we him been has when who will more no
if out so said what up its about into than them can only other new some could time these two may then
do first any my now such like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never day same
another know while last might us great old year off come since against go came right used take three
request response provider session tenant profile model memory config cron job worker server error
warning info debug trace gateway plugin host launch token key value stream event message tool result
provider-key api-server model-id workdir shell-state env-marker soul memory-canary face bead cafe
decade added faded deaf`)

// textCorpus returns size bytes of log- and prose-like text: words,
// timestamps, request ids, JSON fragments and paths.
func textCorpus(rng *rand.Rand, size int) []byte {
	var b strings.Builder
	b.Grow(size + 256)
	for b.Len() < size {
		switch rng.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "2026-11-29T19:%02d:%02d.%03dZ INFO req=%08x ", rng.IntN(60), rng.IntN(60), rng.IntN(1000), rng.Uint32())
		case 1:
			fmt.Fprintf(&b, `{"role":"%s","content":"`, words[rng.IntN(len(words))])
		case 2:
			fmt.Fprintf(&b, "/home/%s/.agentd/profiles/%s/logs/%d.log ", words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(100))
		}
		for n := 4 + rng.IntN(14); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(9) == 0 {
				b.WriteString(", ")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(".\n")
	}
	return []byte(b.String()[:size])
}

// plant writes value encoded as enc into corpus at off, with the base64
// forms embedded in a longer base64 text at the given alignment.
func plantForm(value string, enc Encoding, align int) string {
	switch enc {
	case Base64, Base64URL:
		alg := base64.StdEncoding
		if enc == Base64URL {
			alg = base64.URLEncoding
		}
		return alg.EncodeToString([]byte(strings.Repeat("x", align) + value + "~~"))
	case Base32, Base32Lower, Base32Hex, Base32HexLower:
		alg := base32.StdEncoding
		if enc == Base32Hex || enc == Base32HexLower {
			alg = base32.HexEncoding
		}
		s := alg.EncodeToString([]byte(strings.Repeat("x", align%5) + value + "~~"))
		if enc == Base32Lower || enc == Base32HexLower {
			s = strings.ToLower(s)
		}
		return s
	}
	for _, f := range encodedForms(value) {
		if f.enc == enc {
			return f.value
		}
	}
	panic("no form " + enc)
}

// alignments is how many byte alignments an encoding's needles cover.
func alignments(enc Encoding) int {
	switch enc {
	case Base64, Base64URL:
		return 3
	case Base32, Base32Lower, Base32Hex, Base32HexLower:
		return 5
	}
	return 1
}

// benchEachCorpus runs fn as a sub-benchmark for 2 and for 64 tenants,
// each with the tenants' patterns and a text corpus of SCAN_BENCH_MB MiB
// (default 32) drawn from one seeded rng, which fn may draw on further.
func benchEachCorpus(b *testing.B, fn func(b *testing.B, tenants int, rng *rand.Rand, pats []Pattern, corpus []byte)) {
	mb := 32
	if s := os.Getenv("SCAN_BENCH_MB"); s != "" {
		v, err := strconv.Atoi(s)
		require.NoError(b, err, "SCAN_BENCH_MB")
		mb = v
	}
	for _, tenants := range []int{2, 64} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, uint64(tenants)))
			pats := testPatterns(rng, tenants)
			fn(b, tenants, rng, pats, textCorpus(rng, mb<<20))
		})
	}
}
