package sandbox

import (
	"fmt"
	"io"
)

// Check prints which modes work here and why the others do not (`agentd
// sandbox check`), and what auto resolves to. It returns 0 when some
// sandbox works, 1 when auto finds none (pooled serving then refuses
// terminals of every profile but the launch one).
func Check(w io.Writer) int {
	for _, m := range []Mode{Bwrap, Landlock} {
		if err := Available(m); err != nil {
			fmt.Fprintf(w, "%-8s no: %v\n", m, err)
			continue
		}
		switch m {
		case Bwrap:
			fmt.Fprintf(w, "%-8s ok: own PID, IPC and UTS namespaces, private /proc, read-only system root\n", m)
		case Landlock:
			fmt.Fprintf(w, "%-8s ok: Landlock ABI %d, subreaper launcher\n", m, ABI())
		}
	}
	eff, err := Effective(Auto)
	if err != nil {
		fmt.Fprintf(w, "auto     -> none: %v\n", err)
		fmt.Fprintln(w, "pooled serve and gateway refuse the terminal of every profile but the launch one, unless the managed scope sets terminal.sandbox: none")
		return 1
	}
	fmt.Fprintf(w, "auto     -> %s\n", eff)
	return 0
}
