package scan

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Encoding names the form in which a canary's bytes were found.
type Encoding string

// The encodings a Matcher looks for. Every byte of the canary is encoded
// (percent and JSON escapes included), and the upper- and lower-case hex
// spellings are both sought where an encoding has hex digits.
const (
	Raw        Encoding = "raw"
	Base64     Encoding = "base64"      // standard alphabet, any of the 3 alignments
	Base64URL  Encoding = "base64url"   // URL-safe alphabet, any of the 3 alignments
	Hex        Encoding = "hex"         // lower-case hex digits
	HexUpper   Encoding = "hex-upper"   // upper-case hex digits
	UTF16LE    Encoding = "utf16le"     // each byte followed by a zero byte
	UTF16BE    Encoding = "utf16be"     // each byte preceded by a zero byte
	Percent    Encoding = "percent"     // %XX for every byte, either case
	JSONEscape Encoding = "json-escape" // \u00XX for every byte, either case
	// Base32 in the standard (RFC 4648 A-Z2-7) and extended hex (0-9A-V)
	// alphabets, upper or lower case, padded or not, at any of the 5
	// alignments.
	Base32         Encoding = "base32"
	Base32Lower    Encoding = "base32-lower"
	Base32Hex      Encoding = "base32hex"
	Base32HexLower Encoding = "base32hex-lower"
)

// Encodings lists every encoding in the order needles are built.
var Encodings = []Encoding{Raw, Base64, Base64URL, Hex, HexUpper, UTF16LE, UTF16BE, Percent, JSONEscape,
	Base32, Base32Lower, Base32Hex, Base32HexLower}

// encodedForms returns every needle a value yields, with its encoding, in a
// fixed order. Base64 forms are trimmed of the edge characters that depend on
// the bytes around the value, so the value is found at any alignment.
func encodedForms(v string) []form {
	b := []byte(v)
	out := []form{{Raw, v}}
	for _, e := range []struct {
		enc Encoding
		alg *base64.Encoding
	}{{Base64, base64.StdEncoding}, {Base64URL, base64.URLEncoding}} {
		for align := 0; align < 3; align++ {
			out = append(out, form{e.enc, base64Aligned(e.alg, b, align)})
		}
	}
	lower := hex.EncodeToString(b)
	upper := strings.ToUpper(lower)
	out = append(out, form{Hex, lower}, form{HexUpper, upper})
	le := make([]byte, 0, 2*len(b))
	be := make([]byte, 0, 2*len(b))
	for _, c := range b {
		le = append(le, c, 0)
		be = append(be, 0, c)
	}
	out = append(out, form{UTF16LE, string(le)}, form{UTF16BE, string(be)})
	for _, h := range []string{upper, lower} {
		var p, j strings.Builder
		for i := 0; i < len(h); i += 2 {
			p.WriteString("%" + h[i:i+2])
			j.WriteString(`\u00` + h[i:i+2])
		}
		out = append(out, form{Percent, p.String()}, form{JSONEscape, j.String()})
	}
	for _, e := range []struct {
		upper, lower Encoding
		alg          *base32.Encoding
	}{{Base32, Base32Lower, base32.StdEncoding}, {Base32Hex, Base32HexLower, base32.HexEncoding}} {
		for align := 0; align < 5; align++ {
			s := base32Aligned(e.alg, b, align)
			out = append(out, form{e.upper, s}, form{e.lower, strings.ToLower(s)})
		}
	}
	return out
}

// base32Aligned encodes b as if align bytes preceded it, and keeps only the
// characters whose five bits all come from b.
func base32Aligned(enc *base32.Encoding, b []byte, align int) string {
	buf := make([]byte, align+len(b))
	copy(buf[align:], b)
	s := enc.WithPadding(base32.NoPadding).EncodeToString(buf)
	start := (8*align + 4) / 5
	end := 8 * len(buf) / 5
	if end <= start {
		return ""
	}
	return s[start:end]
}

type form struct {
	enc   Encoding
	value string
}

// base64Aligned encodes b as if align bytes preceded it, and keeps only the
// characters whose six bits all come from b.
func base64Aligned(enc *base64.Encoding, b []byte, align int) string {
	buf := make([]byte, align+len(b))
	copy(buf[align:], b)
	s := enc.EncodeToString(buf)
	start := (8*align + 5) / 6
	end := 8 * len(buf) / 6
	if end <= start {
		return ""
	}
	return s[start:end]
}
