// Command tinyagent runs the example's pooled agent server (package server).
package main

import (
	"os"

	"github.com/tenantcanary/tenantcanary/examples/gotest/server"
)

func main() { os.Exit(server.Main()) }
