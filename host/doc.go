// Package host runs a profile's third-party plugins out of the server: one
// plugin-host child process per profile (`agentd plugin-host`), reached
// over its stdin/stdout with one JSON object per line.
//
// The parent side is a Manager: it starts the host lazily under the
// profile's launcher and home (the host's process, and so its launcher,
// with an allow-list of the server's environment only: the profile's
// comes in the load request, and the host sets it on itself before any
// plugin loads), loads the profile's plugins
// into it, proxies tool calls, hooks and provider objects, serves the
// plugins' nested calls back into the server (DispatchTool, facades) as the
// session of the call they are nested in, fences every reference by the
// host's generation, puts a deadline on every call, and restarts a dead
// host within a budget (3 deaths in 10 minutes, with backoff), skipping a
// plugin that killed its host while loading. A request the dead host never
// received (it died between being picked and being written to) goes once to
// its successor; one it received is never sent twice. The child side is
// ServeChild.
// InProcess is the same Loader for plugins.isolation: in_process.
//
// A host is contained: a call past its deadline (Config.CallTimeout,
// plugins.host.call_timeout) kills it and its whole tree, and the next call
// starts a new one; the host sets its rlimits (Config.Limits, LimitsOf) on
// itself before any plugin code runs; its first process is a keeper, a
// child subreaper running no plugin code, which kills everything the host
// started when the host ends (setsid and double forks included), so nothing
// outlives a host with or without a PID namespace. A launcher that runs the
// host in a PID namespace of its own, which the kernel ends with the host
// (Config.OwnPIDNamespace: agentd's bwrap launcher), does the keeper's
// work, and the host starts none. A host's death is
// logged with the runtime's last words (a panic, out of memory) and the
// last call it was given. A plain Handler's nested calls run as the
// session of the call that invoked it.
//
//	m, err := host.New(host.Config{
//		Profile: "alice", Command: []string{self, "plugin-host"},
//		Home: home, Env: env, PluginsDir: filepath.Join(home, "plugins"),
//		Backend: server,
//	})
//	defer m.Close()
//	out, err := m.Call(ctx, sessionID, "probe_pid", nil)
//
// and in the child:
//
//	err := host.ServeChild(ctx, os.Stdin, os.Stdout, os.Stderr)
//
// # The wire protocol
//
// Each side writes one JSON Frame per line; a frame is at most
// Config.MaxFrame bytes (a larger one is refused by its sender, and breaks
// the connection if it ever arrives). The host's first frame is a hello
// notification {"op":"hello","body":{"protocol":1,"pid":N}}; the parent
// checks the version. Each side numbers its own requests (id); a reply
// names the request it answers (re) and carries body or err {code,
// message}. The parent asks: load, call, hook, provider, schema, extract;
// the host asks: loading (before each plugin, so the parent knows which one
// was loading if it dies), dispatch and facade, naming in parent the call
// they are nested in. Either side may send a cancel notification for a
// request it stopped waiting for. Requests carry timeout_ms; calls carry
// the session.
//
// The codec is in frame.go, the error codes in errors.go, and the
// connection (who reads the stream, and how a call waits) in conn.go and
// conn_read.go.
package host
