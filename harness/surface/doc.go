// Package surface learns a target server's surface: which files of each
// tenant's home the server opens, reads, writes, creates and renames, per
// action, and which processes it starts, with the tenant variables each
// one carries and whether it runs confined (a sandbox's namespaces or
// no_new_privs) or outside every sandbox. The scenarios that attack that
// surface read the map it records (see Recorder) and aim at every point
// of it: every file touched gets the hostile forms of Hostile, every
// unconfined process the environment payloads of Payloads.
//
//	rec, err := surface.NewRecorder(ctx, homes, vars) // homes: tenant -> home
//	defer rec.Close()
//	rec.Begin("session.create", "alpha", serverPID)
//	... drive the action ...
//	act := rec.End() // act.Files, act.Procs
//
// What it sees and what it cannot: inotify reports every open, read,
// write and rename of a watched home, by whoever made it, but not who made
// it: an action is recorded while the harness itself touches nothing, and
// actions with and without tools are told apart. Processes are sampled
// from /proc while an action runs (every SampleEvery), so one that lives
// shorter than that can be missed. Landlock leaves no mark in /proc: a
// process with no_new_privs set counts as confined. A remote target's
// files and processes are out of reach: discovery is skipped there, and
// says so.
package surface
