package attack

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func TestChainsAreValid(t *testing.T) {
	t.Parallel()
	chains := Chains()
	require.NoError(t, ValidateChains(chains))
	// Every class is covered, every fault re-opens at least one row.
	for _, c := range ChainClasses {
		assert.NotEmpty(t, ChainsOf(chains, c), "class %s", c)
	}
	faults := map[string]bool{}
	for _, c := range chains {
		faults[c.Fault] = true
	}
	for _, f := range ChainFaults {
		assert.True(t, faults[f], "no chain re-opens %s", f)
	}
}

func TestValidateChainsRejectsBadRows(t *testing.T) {
	t.Parallel()
	bad := []Chain{
		{ID: "Bad", Class: "nope", Trigger: "never", Fault: "x", Expect: invariants.Control,
			Steps: []Step{{Tool: "echo {nope}", Op: "cron.list"}}},
		{ID: "no-write", Class: HomeLink, Trigger: OnTurn, Fault: FaultHomeFollowsLinks, Expect: invariants.File,
			Tries: "t", Refusal: "r", Steps: []Step{{Tool: "true"}, {Plugin: "no-such-row"}}},
		{ID: "no-write", Class: HomeLink, Trigger: OnTurn, Fault: FaultHomeFollowsLinks, Expect: invariants.File,
			Tries: "t", Refusal: "r"},
	}
	err := ValidateChains(bad)
	for _, want := range []string{"want lower-case words", `class "nope"`, `trigger "never"`, `fault "x"`,
		`"control" is not a leak check`, "exactly one of", "placeholder(s) {nope}", `plugin row "no-such-row"`,
		"write canary", "id given twice", "no step", "tries: want one"} {
		assert.ErrorContains(t, err, want)
	}
}

// The placeholders of a chain are filled from the attacker's and victim's
// places; the job output's relative path reaches the victim's home.
func TestPlacesFillTheTemplates(t *testing.T) {
	t.Parallel()
	pl := Places{Write: "hostile-write-a-0123456789", Home: "/h/.agentd/profiles/a", Victim: "/h/.agentd/profiles/b",
		Files: tenants.AgentdLayout().Files}
	v := pl.Vars()
	assert.Equal(t, "../../../b", v["victim_from_output"])
	assert.Equal(t, "cron/jobs.json", v["jobs"])
	assert.Equal(t, "echo hostile-write-a-0123456789 > /h/.agentd/profiles/b/SOUL.md {unknown}", Fill("echo {write} > {victim}/{soul} {unknown}", v))
	launch := Places{Home: "/h/.agentd", Victim: "/h/.agentd/profiles/b", Files: tenants.AgentdLayout().Files}
	assert.Equal(t, "../../profiles/b", launch.Vars()["victim_from_output"])
	assert.Equal(t, []string{"plugins"}, Places{Files: tenants.FileNames{Config: "c"}}.Missing([]string{"config", "plugins"}))
	for _, c := range Chains() {
		for i, s := range c.Steps {
			if s.Tool != "" {
				cmd := c.ToolRow(i, s, v).Call(Canaries{}).Args["command"].(string)
				assert.NotContains(t, cmd, "{write}", "%s step %d", c.ID, i+1)
				assert.True(t, strings.Contains(cmd, RowDone) || strings.Contains(cmd, "printf"), "%s step %d ends its output", c.ID, i+1)
			}
		}
	}
}
