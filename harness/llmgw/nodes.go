package llmgw

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenantcanary/tenantcanary/harness"
)

// Node is one process of a gateway that runs as several (a target's
// replicas: N with a gateway command): the first is the one Start ran and
// the provisioner talks to, the others join it over the same stores.
type Node struct {
	N    int           // its number, 1 to the target's replica count
	Base string        // http://host:port
	Proc *harness.Proc // nil for a staging gateway
}

// Name is how a scenario names the node: "node N".
func (n Node) Name() string { return fmt.Sprintf("node %d", n.N) }

// ErrNoNodes: the target's gateway runs as one process (no replicas, or
// replicas that are its serve processes), or the harness did not start it.
var ErrNoNodes = errors.New("the gateway runs as one node")

// StartNodes starts the gateway's other nodes (2 to the target's replica
// count), one after another, each on its own port with its number as
// {replica}, on the sandbox's one data folder and stores, and waits until
// each is ready. Nodes start after the first has provisioned the tenants,
// as a cluster's later nodes join a primary that has migrated its
// database. It returns every node, the first included; a second call
// returns the same nodes.
func (g *Gateway) StartNodes(ctx context.Context) ([]Node, error) {
	tg := g.box.Target
	if !tg.ReplicatesGateway() || !g.CanRestart() {
		return nil, fmt.Errorf("gateway %s: %w", tg.Name, ErrNoNodes)
	}
	g.mu.Lock()
	started := len(g.more) > 0
	g.mu.Unlock()
	if !started {
		var more []Node
		for n := 2; n <= tg.ReplicaCount(); n++ {
			node, err := g.startNode(ctx, n)
			if err != nil {
				for _, m := range more {
					m.Proc.Kill()
				}
				return nil, err
			}
			more = append(more, node)
		}
		g.mu.Lock()
		g.more = more
		g.mu.Unlock()
	}
	return g.Nodes(), nil
}

// Nodes are the gateway's running nodes, the first first: one node until
// StartNodes.
func (g *Gateway) Nodes() []Node {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := []Node{{N: 1, Base: g.base, Proc: g.proc}}
	return append(out, g.more...)
}

// ChatAt is Chat on node n.
func (g *Gateway) ChatAt(ctx context.Context, n Node, r harness.ChatRequest) (harness.GatewayReply, error) {
	c := harness.GatewayClient{Base: n.Base, HTTP: g.http}
	return c.Complete(ctx, r)
}

// DoAt is Do on node n.
func (g *Gateway) DoAt(ctx context.Context, n Node, method, path string, headers map[string]string, body []byte) (Reply, error) {
	return g.doAt(ctx, n.Base, method, path, headers, body)
}

// CallRouteAt is CallRoute on node n.
func (g *Gateway) CallRouteAt(ctx context.Context, n Node, r harness.Route, caller harness.GatewayAccess, ids map[string]string) (Reply, bool, error) {
	return g.callRouteAt(ctx, n.Base, r, caller, ids)
}
