// Command agentd is the reference pooled agent server; see package
// github.com/tenantcanary/tenantcanary/agentd/cli.
package main

import (
	"context"
	"os"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr))
}
