// Package plugins brings a profile's plugins into agentd's turns: it loads
// them once per profile scope, in the profile's isolation mode (one plugin
// host per profile under plugins.isolation: host, the interpreter in
// process otherwise; see packages isolation and host), and gives the
// turns' registry everything they registered: their tools beside the
// built-in ones, their hooks (tool and model calls, session start and end),
// their memory providers (initialised, prefetched, synced and shut down
// per session), image_generate over their image providers, and a model
// provider as the profile's LLM provider (model.provider: plugin:<name>).
// Every call runs in the profile's own plugins as the session that made
// it, so their nested calls come back as that session.
//
//	reg, err := plugins.Registry(ctx, sc, builtins, plugins.Options{
//		Command: append(self, "plugin-host"), Backend: srv,
//	})
package plugins
