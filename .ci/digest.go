//go:build ignore

// Command digest prints a short account of a failed test run from
// gotestsum's junit.xml, for the end of .ci/run's log: a CI log is often
// read only from its tail, where gotestsum's own summary of a parent test
// says nothing of why it failed (a data race in another test fails every
// test running at the time). It prints each failed test with the lines of
// its output that say why, and every race report's first frames.
//
//	go run .ci/digest.go junit.xml
package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"strings"
)

type testCase struct {
	Name    string `xml:"name,attr"`
	Failure *struct {
		Text string `xml:",chardata"`
	} `xml:"failure"`
}

type suites struct {
	Suites []struct {
		Name  string     `xml:"name,attr"`
		Cases []testCase `xml:"testcase"`
		Out   string     `xml:"system-out"`
	} `xml:"testsuite"`
}

// why is whether a line of a failed test's output says why it failed.
func why(line string) bool {
	for _, w := range []string{"Error Trace:", "Error:", "race detected", "panic:", "FAIL", "timed out", "Messages:"} {
		if strings.Contains(line, w) {
			return true
		}
	}
	return logLine.MatchString(line)
}

// logLine is a test's t.Log or t.Error line (file.go:NN: text), not a
// stack frame.
var logLine = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run .ci/digest.go JUNIT.xml")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "digest:", err)
		os.Exit(1)
	}
	var s suites
	if err := xml.Unmarshal(data, &s); err != nil {
		fmt.Fprintf(os.Stderr, "digest: parse %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	fmt.Println("---- digest of the failures (from junit.xml) ----")
	for _, su := range s.Suites {
		for _, c := range su.Cases {
			if c.Failure == nil {
				continue
			}
			fmt.Printf("FAIL %s %s\n", su.Name, c.Name)
			n := 0
			for _, line := range strings.Split(c.Failure.Text, "\n") {
				if why(line) && n < 12 {
					fmt.Println("    " + strings.TrimSpace(line))
					n++
				}
			}
		}
		seen := map[string]bool{}
		shown := 0
		for _, r := range strings.Split(su.Out+"\n"+failures(su.Cases), "WARNING: DATA RACE")[1:] {
			lines := strings.Split(strings.TrimSpace(r), "\n")
			lines = lines[:min(len(lines), 24)]
			key := strings.Join(lines[:min(len(lines), 6)], "\n")
			if seen[key] {
				continue
			}
			seen[key] = true
			if shown++; shown > 3 {
				fmt.Printf("RACE %s: more reports in the log\n", su.Name)
				break
			}
			fmt.Printf("RACE %s:\n", su.Name)
			for _, line := range lines {
				fmt.Println("    " + line)
			}
		}
	}
}

// failures is the output of the failed cases, where a race report may
// have been attributed.
func failures(cases []testCase) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, c := range cases {
		if c.Failure != nil && !seen[c.Failure.Text] {
			seen[c.Failure.Text] = true
			b.WriteString(c.Failure.Text)
		}
	}
	return b.String()
}
