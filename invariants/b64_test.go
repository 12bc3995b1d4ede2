package invariants

import "encoding/base64"

// b64 encodes "ab" + value + "." so the value sits at an unaligned spot.
func b64(value string, url bool) string {
	if url {
		return base64.URLEncoding.EncodeToString([]byte("ab" + value + "."))
	}
	return base64.StdEncoding.EncodeToString([]byte("ab" + value + "."))
}
