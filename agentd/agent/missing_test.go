package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// A registry's MissingFunc answers a call of a tool it does not hold, as
// the calling session (a plugin that did not load says so there).
func TestMissingFuncAnswersAnUnknownTool(t *testing.T) {
	t.Parallel()
	client, _, reg := setup(t, func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		if msgs[len(msgs)-1]["role"] == "tool" {
			return fakellm.Text("done")
		}
		return fakellm.ToolCall("gone", map[string]string{})
	})
	rec := &recorder{}
	turn := Turn{Client: client, Model: "m", Tools: reg, Env: &Env{Session: "s1"}, Emit: rec.emit, Persist: rec.persist}
	_, _, err := Run(context.Background(), turn, "x")
	require.NoError(t, err)
	require.Equal(t, `error: unknown tool "gone"`, rec.stored[2].Content, "the default answer")

	var asked []string
	reg.SetMissing(func(ctx context.Context, env *Env, name string) string {
		asked = append(asked, env.Session+" "+name)
		return "error: " + name + " belongs to a plugin that did not load"
	})
	rec = &recorder{}
	turn.Emit, turn.Persist = rec.emit, rec.persist
	_, _, err = Run(context.Background(), turn, "x")
	require.NoError(t, err)
	require.Equal(t, "error: gone belongs to a plugin that did not load", rec.stored[2].Content)
	require.Equal(t, []string{"s1 gone"}, asked)
}
