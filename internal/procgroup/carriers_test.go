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
	cmd := exec.Command("sh", "-c", "sleep 300; : "+inArgs)
	cmd.Env = []string{"CARRIED=" + inEnv}
	Prepare(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = Kill(cmd.Process.Pid); _ = cmd.Wait() })

	var got []Carrier
	require.Eventually(t, func() bool {
		got = Carrying([]string{inEnv, inArgs, "carrier-nobody-has-this"})
		return len(got) >= 2
	}, 10*time.Second, 10*time.Millisecond, "carriers: %+v", got)
	byNeedle := map[string]Carrier{}
	for _, c := range got {
		if c.Pid == cmd.Process.Pid {
			byNeedle[c.Needle] = c
		}
	}
	assert.Equal(t, "environment", byNeedle[inEnv].In)
	assert.Equal(t, "command line", byNeedle[inArgs].In)
	assert.Equal(t, "sh", byNeedle[inArgs].Comm)
	assert.Contains(t, byNeedle[inArgs].Cmdline, inArgs)

	require.NoError(t, Kill(cmd.Process.Pid))
	_ = cmd.Wait()
	assert.Eventually(t, func() bool { return len(Carrying([]string{inArgs})) == 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Nil(t, Carrying(nil))
}
