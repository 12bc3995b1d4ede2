package server

import (
	"errors"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// internalError is the reply to a call that failed inside agentd, unless
// the failure was a home file that is a link (or not a regular file, or
// larger than its limit): that is the profile's own doing, a tenant
// planting something in its home, and it gets rpc.CodeLinkOut with the
// message that names the file and the rule.
func internalError(format string, args ...any) *rpc.Error {
	code := rpc.CodeInternal
	for _, a := range args {
		if err, ok := a.(error); ok && refusedHomeFile(err) {
			code = rpc.CodeLinkOut
		}
	}
	return rpc.Errorf(code, format, args...)
}

// refusedHomeFile reports whether err is homefs's refusal of a home file.
func refusedHomeFile(err error) bool {
	return errors.Is(err, homefs.ErrLink) || errors.Is(err, homefs.ErrNotRegular) || errors.Is(err, homefs.ErrTooLarge)
}
