// Package llm is a small OpenAI Chat Completions client: streamed (SSE)
// answers with tool calls, retries with backoff on 429/5xx and dropped
// connections, and a stall timeout. It carries one profile's key; every
// profile builds its own Client.
//
//	c := &llm.Client{BaseURL: "http://127.0.0.1:8080/v1", APIKey: key, MaxRetries: 2}
//	resp, err := c.Stream(ctx, llm.Request{Model: "m", Messages: msgs, Tools: tools},
//		func(delta string) { fmt.Print(delta) })
//	for _, call := range resp.Message.ToolCalls { ... }
package llm
