package sandbox

import (
	"fmt"
	"io"
)

// Configured is a profile's terminal.sandbox as Check judges it.
type Configured struct {
	Profile string // the profile it was read for
	Mode    Mode   // the configured value (auto when nothing sets it)
	Pinned  bool   // set by the managed (operator) scope
	From    string // the file it came from; "" for the default
	// Network is terminal.network ("" is NetHost), NetworkFrom the managed
	// file that set it ("" for the default).
	Network     Network
	NetworkFrom string
}

// Check prints which modes work here and why the others do not (`agentd
// sandbox check`), what auto resolves to, and what c runs as. It returns 0
// when c runs in a sandbox, or when the operator pinned none (terminals
// then run unconfined by the operator's choice); 1 when it cannot: c names
// a mode that cannot run here, or resolves to none without the operator's
// say-so (pooled serving then refuses the terminal of every profile but the
// launch one).
func Check(w io.Writer, c Configured) int {
	for _, m := range []Mode{Bwrap, Landlock} {
		if err := Available(m); err != nil {
			fmt.Fprintf(w, "%-8s no: %v\n", m, err)
			continue
		}
		switch m {
		case Bwrap:
			fmt.Fprintf(w, "%-8s ok: own PID, IPC and UTS namespaces, private /proc, read-only system root, no capabilities\n", m)
		case Landlock:
			fmt.Fprintf(w, "%-8s ok: Landlock ABI %d, subreaper launcher, no capabilities\n", m, ABI())
		}
	}
	if eff, err := Effective(Auto); err != nil {
		fmt.Fprintf(w, "auto     -> none: %v\n", err)
	} else {
		fmt.Fprintf(w, "auto     -> %s\n", eff)
	}
	if c.Mode == "" {
		c.Mode = Auto
	}
	from := "the default"
	switch {
	case c.Pinned:
		from = "pinned by the operator in " + c.From
	case c.From != "":
		from = "set in " + c.From
	}
	name := c.Profile
	if name == "" {
		name = "the launch profile"
	} else {
		name = "profile " + name
	}
	eff, why, err := Resolve(c.Mode)
	if err == nil && eff != None && checkNetwork(w, name, eff, c) != nil {
		return 1
	}
	switch {
	case err != nil:
		fmt.Fprintf(w, "%s: terminal.sandbox is %s (%s) and it cannot run here: %v\n", name, c.Mode, from, err)
		return 1
	case eff != None:
		fmt.Fprintf(w, "%s: terminal.sandbox is %s (%s) -> %s\n", name, c.Mode, from, eff)
		return 0
	case c.Pinned:
		fmt.Fprintf(w, "%s: terminal.sandbox is none (%s): terminals run with no sandbox, as the operator allowed\n", name, from)
		return 0
	default:
		fmt.Fprintf(w, "%s: terminal.sandbox is %s (%s) -> none: %s\n", name, c.Mode, from, why)
		fmt.Fprintln(w, "pooled serve and gateway refuse the terminal of every profile but the launch one, unless the managed scope sets terminal.sandbox: none")
		return 1
	}
}

// checkNetwork prints how terminal.network is enforced in mode eff, or why
// it cannot be (an error: the terminal would be refused).
func checkNetwork(w io.Writer, name string, eff Mode, c Configured) error {
	n := c.Network
	if n == "" {
		n = NetHost
	}
	from := "the default"
	if c.NetworkFrom != "" {
		from = "pinned by the operator in " + c.NetworkFrom
	}
	switch {
	case n == NetHost:
		fmt.Fprintf(w, "%s: terminal.network is host (%s): its terminal reaches the host's network\n", name, from)
	case eff == Bwrap:
		fmt.Fprintf(w, "%s: terminal.network is none (%s): a network namespace of its own (loopback only)\n", name, from)
	default:
		netns, err := landlockNetNone()
		switch {
		case err != nil:
			fmt.Fprintf(w, "%s: terminal.network is none (%s) and it cannot be enforced here: %v\n", name, from, err)
			return err
		case netns:
			fmt.Fprintf(w, "%s: terminal.network is none (%s): a network namespace of its own, and no TCP (Landlock)\n", name, from)
		default:
			fmt.Fprintf(w, "%s: terminal.network is none (%s): no TCP bind or connect (Landlock ABI %d); other protocols (UDP) stay open without a network namespace, which only root may make here\n", name, from, ABI())
		}
	}
	return nil
}
