// Package scan finds canaries in bytes: one Matcher built from every canary
// of every tenant in every encoding (raw, base64 in both alphabets at the
// three alignments, hex in both cases, UTF-16LE/BE, percent- and JSON
// \u00XX-escaped) finds them all in one pass, at a cost that grows with the
// bytes scanned rather than with bytes times canaries.
//
// On top of the Matcher, File scans one file (decompressed as well when it
// is gzip; as raw pages and row by row through SQL, on a copy taken with its
// WAL, when it is a SQLite database) and Tree scans every regular file under
// a root without following symlinks, reporting what it could not read.
//
//	m, err := scan.Compile([]scan.Pattern{{Owner: "beta", Kind: "provider_key", Value: key}})
//	if err != nil { ... }
//	m.Find(body, func(x scan.Match) {
//		fmt.Println(x.Pattern.Owner, x.Pattern.Kind, x.Encoding, x.Start)
//	})
package scan
