// Package scancmd is the logic of `canary-run scan`: scan files and trees
// for a list of canaries, in every encoding the scanner knows, and say what
// was found where.
//
//	os.Exit(scancmd.Run(ctx, os.Args[2:], os.Stdout, os.Stderr))
//
// The canaries file is a JSON array of {"owner","kind","value"}. Each
// finding is printed on one line as `owner kind encoding path:offset`
// (path!gunzip:offset inside a gzip file, path[table row N column]:offset
// in a SQLite row), or as one JSON object a line with --json. The exit code
// is 0 when nothing was found, 1 when something was, 2 on a usage error or
// when anything could not be read (the scan is then incomplete, and the
// findings printed are not all there may be).
package scancmd
