// Package sqlitefile makes the URI that opens an SQLite file by path
// (modernc.org/sqlite's "file:" data source names).
//
//	db, err := sql.Open("sqlite", sqlitefile.URI(path, "mode=ro"))
package sqlitefile

import "strings"

// escaper escapes what would end or change a path inside a URI: '%' first
// (it starts an escape), then '?' (the query) and '#' (a fragment).
var escaper = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// URI is "file:<path>" with the path escaped, then "?query" when query is
// not empty (already encoded: "mode=ro", url.Values.Encode()).
func URI(path, query string) string {
	u := "file:" + escaper.Replace(path)
	if query != "" {
		u += "?" + query
	}
	return u
}
