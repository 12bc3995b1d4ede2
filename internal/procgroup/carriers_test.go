package procgroup

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCarryingFindsEnvironmentAndCommandLine(t *testing.T) {
	t.Parallel()
	inEnv, inArgs := "carrier-env-"+time.Now().Format("150405.000000000"), "carrier-args-"+time.Now().Format("150405.000000000")
	inBoth := "carrier-both-" + time.Now().Format("150405.000000000")
	cmd := exec.Command("sh", "-c", "sleep 300; : "+inArgs+" "+inBoth)
	cmd.Env = []string{"CARRIED=" + inEnv, "BOTH=" + inBoth}
	Prepare(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = Kill(cmd.Process.Pid); _ = cmd.Wait() })

	var got []Carrier
	require.Eventually(t, func() bool {
		got = Carrying([]string{inEnv, inArgs, "carrier-nobody-has-this", inBoth})
		return len(got) >= 3
	}, 10*time.Second, 10*time.Millisecond, "carriers: %+v", got)
	byNeedle := map[string]Carrier{}
	for _, c := range got {
		if c.Pid == cmd.Process.Pid {
			_, twice := byNeedle[c.Needle]
			assert.False(t, twice, "%s reported once", c.Needle)
			byNeedle[c.Needle] = c
		}
	}
	assert.Equal(t, "environment", byNeedle[inEnv].In)
	assert.Equal(t, "sh", byNeedle[inEnv].Comm)
	assert.Equal(t, "command line", byNeedle[inBoth].In, "a needle in both places is the command line's")
	assert.Equal(t, "command line", byNeedle[inArgs].In)
	assert.Equal(t, "sh", byNeedle[inArgs].Comm)
	assert.Contains(t, byNeedle[inArgs].Cmdline, inArgs)

	require.NoError(t, Kill(cmd.Process.Pid))
	// Dead but not yet waited for (a zombie): no longer a carrier.
	assert.Eventually(t, func() bool { return len(Carrying([]string{inArgs, inEnv})) == 0 }, 10*time.Second, 10*time.Millisecond)
	_ = cmd.Wait()
	assert.Empty(t, Carrying([]string{inArgs, inEnv}))
	assert.Nil(t, Carrying(nil))
}

// BenchmarkCarrying is one look over every process of the machine for a
// needle none holds: what the escape checks poll.
func BenchmarkCarrying(b *testing.B) {
	for b.Loop() {
		if got := Carrying([]string{"carrier-bench-nobody-has-this"}); len(got) != 0 {
			b.Fatalf("carriers: %+v", got)
		}
	}
}
