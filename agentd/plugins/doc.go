// Package plugins brings a profile's plugins into agentd's turns: it loads
// them once per profile scope, in the profile's isolation mode (one plugin
// host per profile under plugins.isolation: host, the interpreter in
// process otherwise; see packages isolation and host), and offers their
// tools beside the built-in ones. A plugin tool runs as the session that
// called it, so its nested calls come back as that session.
//
//	reg, err := plugins.Registry(ctx, sc, builtins, plugins.Options{
//		Command: append(self, "plugin-host"), Backend: srv,
//	})
package plugins
