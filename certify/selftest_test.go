package certify

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestToolSandboxOfAPreflight: the sandbox the self-test seeds faults for
// comes from the embedded agentd's own check (the launch profile's line
// first, else what auto resolves to); a check that says neither seeds
// every fault.
func TestToolSandboxOfAPreflight(t *testing.T) {
	t.Parallel()
	const landlock = `bwrap    no: sandbox unavailable: bwrap: bubblewrap is not installed (package bubblewrap)
landlock ok: Landlock ABI 7, subreaper launcher, no capabilities
auto     -> landlock
the launch profile: terminal.network is none (the default): a network namespace of its own, and no TCP (Landlock)
the launch profile: terminal.sandbox is auto (the default) -> landlock
`
	assert.Equal(t, "landlock", toolSandboxOf(landlock))
	assert.Equal(t, "bwrap", toolSandboxOf("bwrap    ok: own PID, IPC and UTS namespaces\nauto     -> bwrap\n"))
	pinned := "auto     -> bwrap\nthe launch profile: terminal.sandbox is landlock (pinned by the operator in /m/config.yaml) -> landlock\n"
	assert.Equal(t, "landlock", toolSandboxOf(pinned), "the operator's pin outranks auto")
	assert.Equal(t, "", toolSandboxOf("ok    ready line\nok    health\n"))
}
