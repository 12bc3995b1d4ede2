package tenants

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/stretchr/testify/require"
)

// TestDefaultResponderEndsTheAnthropicToolLoop: an agent on the official
// Anthropic SDK gets the probe as a tool call, and its tool_result (a user
// message, since Anthropic has no tool role) gets the closing text, so the
// turn ends instead of calling the tool forever.
func TestDefaultResponderEndsTheAnthropicToolLoop(t *testing.T) {
	t.Parallel()
	s, err := Build(t.TempDir(), Options{Names: []string{"default", "alpha"}})
	require.NoError(t, err)
	defer s.Close()
	a := s.Get("alpha")
	c := anthropic.NewClient(option.WithBaseURL(strings.TrimSuffix(a.Provider.BaseURL, "v1")),
		option.WithAPIKey(a.ProviderKey()), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := anthropic.MessageNewParams{
		Model: anthropic.Model(a.Model()), MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "terminal",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}},
	}
	msg, err := c.Messages.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonToolUse, msg.StopReason)
	var use anthropic.ContentBlockUnion
	for _, b := range msg.Content {
		if b.Type == "tool_use" {
			use = b
		}
	}
	require.Contains(t, string(use.Input), ProbeBegin)
	params.Messages = append(params.Messages, msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, ProbeBegin+"\nPATH=/bin\n"+ProbeEnd, false)))
	msg, err = c.Messages.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "the tool result ends the loop")
	require.Len(t, msg.Content, 1)
	require.Equal(t, "probe done for alpha ["+a.Value(Reply)+"]", msg.Content[0].Text)
}
