package fakellm_test

import (
	"context"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

func Example() {
	srv, err := fakellm.New(fakellm.Options{
		Keys:   []string{"sk-alice"},
		Script: []fakellm.Response{fakellm.Text("hello, alice")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client := openai.NewClient(option.WithBaseURL(srv.BaseURL+"/"), option.WithAPIKey("sk-alice"))
	resp, err := client.Chat.Completions.New(context.Background(), mainTurn("model-alice", "hi"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Choices[0].Message.Content)
	for _, r := range srv.Requests() {
		fmt.Println(r.Kind, r.Path, r.Auth, r.Model(), r.Status)
	}
	// Output:
	// hello, alice
	// main /v1/chat/completions sk-alice model-alice 200
}
