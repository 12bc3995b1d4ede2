// Package scan finds canaries in bytes: one Matcher built from every canary
// of every tenant in every encoding (raw, base64 in both alphabets at the
// three alignments, base32 in the standard and hex alphabets in either case
// at the five alignments, hex in both cases, UTF-16LE/BE, percent- and
// JSON \u00XX-escaped) finds them all in one pass, at a cost that grows
// with the bytes scanned rather than with bytes times canaries.
//
// The same pass finds the runs of base64 and hex text in the bytes (a few
// bytes read per window of text): a run cut by line breaks or "\n" escapes
// (PEM, MIME, base64 wrapped at any width) is joined and matched again, and
// a run long enough to hold a needle is decoded and its bytes scanned again
// (base64 of gzip, hex of base64), to MaxDecodeDepth decodings. A container
// the bytes start with (gzip, bzip2, zlib, zip, tar) is opened and its
// members scanned, nested to MaxDepth; a stream that expands past the
// Limits (a decompression bomb) is stopped and reported, never followed.
// A match says how it was reached in its Container: "zip:a/b.tgz -> gzip ->
// tar:c.log", "base64@120 -> gzip", "unwrapped@64".
//
// On top of the Matcher, File scans one file (as a SQLite database too:
// its raw pages and its WAL's, and row by row, read from a bounded
// snapshot of both through the file format, or through SQL on a copy for
// what the file-format reader leaves to the engine) and Tree scans every
// regular file under a root without following symlinks, reporting what
// it could not read or refused to follow.
//
//	m, err := scan.Compile([]scan.Pattern{{Owner: "beta", Kind: "provider_key", Value: key}})
//	if err != nil { ... }
//	m.Find(body, func(x scan.Match) {
//		fmt.Println(x.Pattern.Owner, x.Pattern.Kind, x.Encoding, x.Container, x.Start)
//	})
package scan
