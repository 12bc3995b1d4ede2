// Package host runs a profile's third-party plugins out of the server: one
// plugin-host child process per profile (`agentd plugin-host`), reached
// over its stdin/stdout with one JSON object per line.
//
// The parent side is a Manager: it starts the host lazily under the
// profile's launcher, environment and home, loads the profile's plugins
// into it, proxies tool calls, hooks and provider objects, serves the
// plugins' nested calls back into the server (DispatchTool, facades) as the
// session of the call they are nested in, fences every reference by the
// host's generation, puts a deadline on every call, and restarts a dead
// host within a budget (3 deaths in 10 minutes, with backoff), skipping a
// plugin that killed its host while loading. The child side is ServeChild.
// InProcess is the same Loader for plugins.isolation: in_process.
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
package host
