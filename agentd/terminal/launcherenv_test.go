package terminal

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestShellsEnvironmentStaysInsideTheSandbox (issue 46): a tenant's
// variable in the shell's environment reaches the shell, and neither
// bwrap's outer process nor the Landlock launcher's two stages, which
// start it from outside the sandbox, start with it; with the launcher-env
// fault they do (the positive control). Nothing of the tree outlives
// Close.
func TestShellsEnvironmentStaysInsideTheSandbox(t *testing.T) {
	t.Parallel()
	for _, m := range []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock} {
		for _, fault := range []bool{false, true} {
			t.Run(string(m)+"/fault="+strconv.FormatBool(fault), func(t *testing.T) {
				t.Parallel()
				s := newSandboxed(t, m, func(p *sandbox.Policy) { p.EnvOutside = fault })
				mark := "X_TENANT_MARK=" + tok()
				s.sh.opts.Env = append(s.sh.opts.Env, mark)
				res := run(t, s.sh, "echo $$ X_TENANT_MARK=$X_TENANT_MARK")
				self, seen, _ := strings.Cut(strings.TrimSpace(res.Output), " ")
				require.Equal(t, mark, seen, "(a) the shell sees its environment")

				root := s.sh.Pid()
				tree := append([]int{root}, procgroup.Descendants(root)...)
				outside, want := procgroup.SameMountNS(tree), 1 // bwrap's outer process
				if m == sandbox.Landlock {
					var launchers []int
					for _, pid := range outside {
						if strconv.Itoa(pid) != self { // the shell, restricted, in our PID namespace
							launchers = append(launchers, pid)
						}
					}
					outside, want = launchers, 2 // the first stage and the keeper
				}
				require.Len(t, outside, want, "the programs outside the sandbox, of the tree %v", tree)
				var carrying []int
				for _, pid := range outside {
					for _, kv := range procgroup.Environ(pid) {
						if kv == mark {
							carrying = append(carrying, pid)
						}
					}
				}
				if fault {
					require.NotEmpty(t, carrying, "(c) positive control: with the launcher-env fault the outside programs start with the tenant's variable")
				} else {
					require.Empty(t, carrying, "(b) a program outside the sandbox started with the tenant's variable")
				}
				require.NoError(t, s.sh.Close())
				for _, pid := range tree {
					require.False(t, procgroup.Alive(pid), "pid %d of the shell's tree survived Close", pid)
				}
			})
		}
	}
}
