package certificate

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/scenarios"
)

// junit10 is Jenkins' junit-10.xsd (xunit-plugin), written down as the
// elements each element may hold and the attributes it may carry (true:
// required). No XSD library: these are the schema's rules, checked one by
// one.
var junit10 = map[string]struct {
	children map[string]bool
	attrs    map[string]bool
	text     bool // mixed content or a string type
}{
	"testsuites": {
		children: set("testsuite"),
		attrs:    map[string]bool{"name": false, "time": false, "tests": false, "failures": false, "errors": false},
	},
	"testsuite": {
		children: set("testsuite", "properties", "testcase", "system-out", "system-err"),
		attrs: map[string]bool{"name": true, "tests": true, "failures": true, "errors": true, "group": false,
			"time": false, "skipped": false, "timestamp": false, "hostname": false, "id": false,
			"package": false, "file": false, "log": false, "url": false},
	},
	"properties": {children: set("property"), attrs: map[string]bool{}},
	"property":   {children: set(), attrs: map[string]bool{"name": true, "value": true}},
	"testcase": {
		children: set("skipped", "error", "failure", "rerunFailure", "rerunError", "flakyFailure", "flakyError", "system-out", "system-err"),
		attrs:    map[string]bool{"name": true, "time": false, "classname": false, "group": false},
	},
	"failure":    {children: set(), attrs: map[string]bool{"type": false, "message": false}, text: true},
	"error":      {children: set(), attrs: map[string]bool{"type": false, "message": false}, text: true},
	"skipped":    {children: set(), attrs: map[string]bool{"type": false, "message": false}, text: true},
	"system-out": {children: set(), attrs: map[string]bool{}, text: true},
	"system-err": {children: set(), attrs: map[string]bool{}, text: true},
}

// surefireTime is the schema's SUREFIRE_TIME pattern, anchored.
var surefireTime = regexp.MustCompile(`^(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]*)?$`)

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// validateJUnit10 checks doc against junit10 and returns every violation.
func validateJUnit10(doc []byte) []string {
	var errs []string
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var stack []string
	roots := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return append(errs, "not well-formed: "+err.Error())
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			name := tok.Name.Local
			where := strings.Join(append(stack, name), "/")
			rule, known := junit10[name]
			switch {
			case !known:
				errs = append(errs, where+": element not in the schema")
			case len(stack) == 0:
				roots++
				if name != "testsuites" && name != "testsuite" {
					errs = append(errs, where+": not a root element of the schema")
				}
			case !junit10[stack[len(stack)-1]].children[name]:
				errs = append(errs, where+": not allowed inside "+stack[len(stack)-1])
			}
			seen := map[string]bool{}
			for _, a := range tok.Attr {
				seen[a.Name.Local] = true
				if _, ok := rule.attrs[a.Name.Local]; known && !ok {
					errs = append(errs, fmt.Sprintf("%s: attribute %q not in the schema", where, a.Name.Local))
				}
				if a.Name.Local == "time" && (name == "testsuite" || name == "testsuites") && !surefireTime.MatchString(a.Value) {
					errs = append(errs, fmt.Sprintf("%s: time %q is not a SUREFIRE_TIME", where, a.Value))
				}
			}
			for a, required := range rule.attrs {
				if required && !seen[a] {
					errs = append(errs, fmt.Sprintf("%s: required attribute %q missing", where, a))
				}
			}
			stack = append(stack, name)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && !junit10[stack[len(stack)-1]].text && strings.TrimSpace(string(tok)) != "" {
				errs = append(errs, strings.Join(stack, "/")+": text where the schema allows none")
			}
		}
	}
	if roots != 1 {
		errs = append(errs, fmt.Sprintf("%d root elements, want 1", roots))
	}
	return errs
}

func TestValidatorRefusesWhatTheSchemaRefuses(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		`<testsuites skipped="1"></testsuites>`:                                                                                            `attribute "skipped" not in the schema`,
		`<testsuites><testsuite name="a" tests="1" failures="0"/></testsuites>`:                                                            `required attribute "errors" missing`,
		`<testsuites><testcase name="a"/></testsuites>`:                                                                                    `not allowed inside testsuites`,
		`<testsuites><testsuite name="a" tests="1" failures="0" errors="0" time="1s"/></testsuites>`:                                       `is not a SUREFIRE_TIME`,
		`<testsuites><testsuite name="a" tests="1" failures="0" errors="0"><testcase name="x"><skip/></testcase></testsuite></testsuites>`: `element not in the schema`,
		`<testsuites><testsuite name="a" tests="1" failures="0" errors="0"><testcase>hi</testcase></testsuite></testsuites>`:               `text where the schema allows none`,
	} {
		errs := validateJUnit10([]byte(doc))
		require.NotEmpty(t, errs, doc)
		require.Contains(t, strings.Join(errs, "\n"), want, doc)
	}
	require.Empty(t, validateJUnit10([]byte(`<testsuites name="x" time="1,234.5"><testsuite name="a" tests="1" failures="0" errors="0" skipped="1"><properties><property name="p" value="v"/></properties><testcase name="c" classname="a"><skipped message="m">why</skipped></testcase></testsuite></testsuites>`)))
}

func TestJUnitValidatesAgainstJenkinsJUnit10(t *testing.T) {
	t.Parallel()
	withCheck := passing("settings-writes")
	withCheck.Skipped = []scenarios.SkippedCheck{{Invariant: "file", Reason: "the target's files are out of reach"}}
	c := sample(passing("pooled-serve"), leaking("gateway"), failing("restart"), skipped("files"), withCheck)
	c.Fail(fmt.Errorf("self-test: interrupted"))
	var buf bytes.Buffer
	require.NoError(t, c.WriteJUnit(&buf))
	require.Empty(t, validateJUnit10(buf.Bytes()), buf.String())

	// The check skipped inside a passing scenario is a skipped test case,
	// not only a property: a CI reporter must not count it as passed.
	var got JUnitSuites
	require.NoError(t, xml.Unmarshal(buf.Bytes(), &got))
	var suite *JUnitSuite
	for i := range got.Suites {
		if got.Suites[i].Name == "settings-writes" {
			suite = &got.Suites[i]
		}
	}
	require.NotNil(t, suite)
	require.Equal(t, 1, suite.Skipped)
	require.Equal(t, 3, suite.Tests, "two phases and the skipped check")
	last := suite.Cases[len(suite.Cases)-1]
	require.Equal(t, "check file", last.Name)
	require.NotNil(t, last.Skipped)
	require.Equal(t, "the target's files are out of reach", last.Skipped.Message)

	// The counts add up, as reporters recompute them.
	tests := 0
	for _, s := range got.Suites {
		tests += s.Tests
		n, f, e, k := 0, 0, 0, 0
		for _, tc := range s.Cases {
			n++
			switch {
			case tc.Failure != nil:
				f++
			case tc.Error != nil:
				e++
			case tc.Skipped != nil:
				k++
			}
		}
		require.Equal(t, []int{n, f, e, k}, []int{s.Tests, s.Failures, s.Errors, s.Skipped}, s.Name)
	}
	require.Equal(t, strconv.Itoa(tests), strconv.Itoa(got.Tests))
}

func TestVerdictLineSaysPartial(t *testing.T) {
	t.Parallel()
	reports := []scenarios.Report{passing("a"), passing("b"), passing("c"), passing("d")}
	for _, id := range []string{"e", "f", "g", "h", "i"} {
		reports = append(reports, skipped(id))
	}
	c := sample(reports...)
	require.Equal(t, Certified, c.Verdict)
	require.Equal(t, "5 of 9 scenarios skipped", c.Partial())
	require.True(t, strings.HasPrefix(c.Headline(), "certified, partial: 5 of 9 scenarios skipped: "), c.Headline())
	var table, md bytes.Buffer
	require.NoError(t, c.WriteTable(&table))
	require.Contains(t, table.String(), "verdict: certified, partial: 5 of 9 scenarios skipped")
	require.NoError(t, c.WriteMarkdown(&md))
	require.Contains(t, md.String(), "## tenantcanary: certified, partial: 5 of 9 scenarios skipped")

	withCheck := passing("a")
	withCheck.Skipped = []scenarios.SkippedCheck{{Invariant: "file", Reason: "remote"}, {Invariant: "text", Reason: "remote"}}
	c = sample(withCheck, skipped("b"))
	require.Equal(t, "1 of 2 scenarios skipped, 2 checks skipped", c.Partial())
	require.Equal(t, "not run: b; checks not made: file, text", c.DidNotRun())
	require.True(t, strings.HasSuffix(c.Headline(), "in what ran; not run: b; checks not made: file, text"), "the verdict line names what did not run: %s", c.Headline())
	many := []scenarios.Report{withCheck, withCheck}
	for i := range 10 {
		many = append(many, skipped(fmt.Sprintf("s%d", i)))
	}
	require.Equal(t, "not run: s0, s1, s2, s3, s4, s5, s6, s7, and 2 more; checks not made: file (2 scenarios), text (2 scenarios)", sample(many...).DidNotRun())
	require.Contains(t, c.Headline(), "certified, partial: 1 of 2 scenarios skipped, 2 checks skipped")

	c = sample(passing("a"))
	require.Empty(t, c.Partial())
	require.Equal(t, Certified.Headline(), c.Headline(), "a whole run says plainly certified")
}
