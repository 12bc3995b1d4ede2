// Package homefs is agentd's one way into a profile's home: every file
// agentd opens, creates, renames, reads, writes or removes in a home (and
// in a job's output folder) goes through a Home.
//
// A tenant's sandboxed terminal can write its own home, so it can replace
// any file there with a symlink to another tenant's home or to a system
// path and wait for agentd, which runs outside every sandbox, to follow it.
// A Home never follows a symlink:
//
//   - Names are local paths (filepath.IsLocal): no "..", nothing absolute.
//   - The home itself is opened by its path: a tenant writes inside its
//     home, never the folder that holds it, so it cannot swap the home.
//   - Every folder below the home is walked one component at a time with
//     O_NOFOLLOW|O_DIRECTORY, and the file itself is opened with
//     O_NOFOLLOW, so a symlink is refused wherever it is, even one that
//     stays inside the home. Every file agentd keeps in a home
//     (config.yaml, .env, SOUL.md, memories/MEMORY.md, state.db*, logs/*,
//     cron/jobs.json, cron/jobs.lock, cron/output/*, plugins/*, caches) is
//     written by agentd or by the tenant as a plain file; none is
//     legitimately a link, so a link there is an attack or a mistake and
//     the safe answer is the same for both. The check is the open itself,
//     so swapping a file for a link between a check and the use cannot win.
//   - Why not os.Root alone: Root.OpenFile resolves a symlink at the last
//     component itself (it retries after ELOOP) and follows links that stay
//     inside the root, so it cannot say "no link here". The walk above is
//     what openat2(RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH) does, without
//     needing Linux 5.6 or a seccomp policy that allows openat2. os.Root
//     still judges where a refused link leads: out of the home
//     ("path escapes from parent": ErrLinkOut) or inside it.
//   - A file must be a regular file (a FIFO would block the server, a
//     device would be read as the server's user); it is opened with
//     O_NONBLOCK so even a FIFO planted there cannot hang the open, and
//     judged by fstat on the descriptor opened, never by a path looked at
//     before or after.
//   - A file is read up to the limit of its kind (LimitOf: config.yaml and
//     .env 1 MiB, SOUL.md and memories 4 MiB, cron/jobs.json 8 MiB, a
//     plugin.yaml 64 KiB, a plugin's other files 4 MiB, anything else
//     4 MiB): a larger one is refused with ErrTooLarge (TooLargeError
//     names the file and the limit) from its size on the descriptor,
//     before a byte is read, and a file that grows while read is cut at
//     limit+1 bytes and refused. A folder listed (ReadDir) holds at most
//     MaxDirEntries entries.
//   - Stat gives a file's ID (device, inode, size, mtime, ctime) without
//     opening it: agentd's state database pins the file it first opened
//     by it, so a connection opened later by path finds that file or none.
//
// A refused link is an error wrapping ErrLink, and ErrLinkOut too when the
// link leaves the home; the message names the file and the rule, never
// the link's target or the content of any file.
//
// Names are slash-separated paths relative to the home ("SOUL.md",
// "cron/output/<id>/<ts>.md"); a name that is not local (absolute, or
// with "..") is refused with ErrBadName.
//
// FollowLinks is the seeded fault home-follows-links (test-only): every
// operation then uses plain paths joined to the home and follows links,
// as agentd v0.3.0 did. SpecialFiles is the seeded fault
// home-special-files (test-only): files are opened blocking, need not be
// regular and are read whole, as agentd 0.14.1 read the files it read
// lazily.
//
// A Home is an fs.FS (Open, ReadDir, ReadFile, with the limits above), so
// code that knows no homes (pluginload.DiscoverFS) walks a tenant's
// folder through it. Package hostile plants, for tests, what a tenant
// leaves where a file belongs: a FIFO, a link to /dev/zero, a 20 GiB
// sparse file, a folder, a socket.
//
//	h := homefs.Home{Dir: "/home/u/.agentd/profiles/work"}
//	soul, err := h.ReadFile("SOUL.md")              // ErrLinkOut if SOUL.md -> ../other/.env
//	err = h.WriteFileAtomic("config.yaml", data, 0o600)
//	f, err := h.OpenFile("logs/agent.log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
package homefs
