// Package cli is agentd's command line. Main is the whole program: the
// agentd binary calls it, and so can any binary that re-executes itself as
// agentd (canary-run's embedded target), since nothing here depends on the
// binary's name.
//
//	func main() {
//		os.Exit(cli.Main(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr))
//	}
//
// Commands: tui (the stdio JSON-RPC backend), serve (websocket, every
// profile in one process, with the cron ticker), gateway (OpenAI-compatible
// HTTP), profile root|list|create|delete,
// cron create|trigger|list|tick, version. Every command answers --help
// (its usage and its flag set's flags) and --version.
package cli
