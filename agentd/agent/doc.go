// Package agent is agentd's turn loop and its tool registry.
//
// A turn calls the model, runs the tool calls it asks for, appends their
// results and calls it again, until the model answers in text or the
// iteration cap is reached. Every message is handed to Persist as it is
// made, and the turn events of the tenant-server protocol go to Emit as
// they happen. Tools implement Tool; the built-in terminal tool runs in the
// session's own persistent shell, and plugin tools join the same Registry.
//
//	reg := agent.NewRegistry()
//	_ = reg.Register(agent.TerminalTool{})
//	answer, history, err := agent.Run(ctx, agent.Turn{
//		Client: client, Model: "m", System: prompt, History: history,
//		Tools: reg, Env: &agent.Env{Session: sid, Shell: shellFor},
//		Emit: emit, Persist: persist,
//	}, "hello")
package agent
