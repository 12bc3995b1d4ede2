// Package scancmd is the logic of `canary-run scan`: scan files and trees
// for a list of canaries, in every encoding and container the scanner
// knows, and say what was found where.
//
//	os.Exit(scancmd.Run(ctx, os.Args[2:], os.Stdout, os.Stderr))
//
// The canaries file is a JSON array of {"owner","kind","value"}, or a
// roster (tenants.json as `canary-run fakellm` writes it); it must be a
// regular file of at most MaxCanariesBytes. Each finding is printed on one
// line as `owner kind encoding path:offset` (with each container layer
// after a "!": path!gzip:offset, path!zip:a.log!gzip:offset, and a SQLite
// row in brackets: path[table row N column]:offset), or as one JSON object
// a line with --json. With --ignore-own a canary in its owner's own home
// (the launch home for the launch tenant, profiles/<name> for a profile)
// is no finding. A PATH that is a named pipe, device or socket is refused
// unless --allow-special. The exit code is 0 when nothing was found, 1
// when something was, 2 on a usage error or when anything could not be
// read or was refused (a decompression bomb, a nesting past the bounds, a
// database too large to copy: the scan is then incomplete, and the
// findings printed are not all there may be).
package scancmd
