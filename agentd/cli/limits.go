package cli

import (
	"flag"
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/server"
)

// limitFlags registers the fairness limits of `serve` and `gateway` on fs
// (0 = the machine's default, shown in --help).
func limitFlags(fs *flag.FlagSet) *server.Limits {
	l := &server.Limits{}
	d := server.DefaultLimits()
	fs.IntVar(&l.Requests, "max-requests", 0, fmt.Sprintf("requests handled at once, in all (default %d)", d.Requests))
	fs.IntVar(&l.ProfileRequests, "profile-requests", 0, fmt.Sprintf("requests addressing one profile handled at once (default %d)", d.ProfileRequests))
	fs.IntVar(&l.ConnRequests, "conn-requests", 0, fmt.Sprintf("requests of one connection handled at once (default %d)", d.ConnRequests))
	fs.IntVar(&l.Turns, "max-turns", 0, fmt.Sprintf("turns running at once, in all (default %d)", d.Turns))
	fs.IntVar(&l.ProfileTurns, "profile-turns", 0, fmt.Sprintf("turns of one profile running at once (default %d)", d.ProfileTurns))
	fs.IntVar(&l.ConnQueue, "conn-queue", 0, fmt.Sprintf("requests, and turns, one connection may have waiting; past it: error 4290 (default %d)", d.ConnQueue))
	fs.IntVar(&l.ProfileQueue, "profile-queue", 0, fmt.Sprintf("requests, and turns, one profile may have waiting; past it: error 4290 (default %d)", d.ProfileQueue))
	fs.IntVar(&l.Queue, "max-queue", 0, fmt.Sprintf("requests, and turns, waiting in all; past it: error 4290 (default %d)", d.Queue))
	fs.IntVar(&l.ProfileSessions, "profile-sessions", 0, fmt.Sprintf("live sessions of connections in one profile; past it: error 4290 (default %d)", d.ProfileSessions))
	return l
}
