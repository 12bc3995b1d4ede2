// Package plugin is the SDK a plugin author imports. A plugin is a folder
// plugins/<name>/ holding plugin.yaml (name, version, kind) and Go source,
// run by an embedded interpreter (yaegi), that defines
//
//	func Register(ctx plugin.Context) error
//
// Register receives the plugin's Context and registers what the plugin
// offers: tools, hooks, provider objects behind the interfaces below,
// platform adapters and CLI commands. Whether the plugin runs inside the
// server or in a plugin host child process (plugins.isolation) is invisible
// to it, except where the isolation package's boundary tables say otherwise.
//
// The SDK stays compatible: a plugin written for an older release loads
// unchanged. An interface a plugin implements never gains a method; a new
// one arrives as an optional interface of its own, which the server checks
// with a type assertion, as io.Copy checks for io.WriterTo (Shutdowner, for
// memory providers, is one). .ci/apidiff fails CI on an incompatible change
// of this package's API against the last release.
//
//	package probe
//
//	import (
//		"context"
//		"os"
//		"strconv"
//
//		"github.com/tenantcanary/tenantcanary/plugin"
//	)
//
//	func Register(ctx plugin.Context) error {
//		return ctx.RegisterTool(plugin.Tool{
//			Name: "probe_pid",
//			ContextHandler: func(c context.Context, args map[string]any) (string, error) {
//				return strconv.Itoa(os.Getpid()) + " for " + plugin.SessionID(c), nil
//			},
//		})
//	}
package plugin
