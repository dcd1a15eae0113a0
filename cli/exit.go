package cli

import "errors"

// Exit codes of kubectl coastguard, for scripts and CI. Any other error
// exits 1.
const (
	// ExitUnhealthy: `status` found the cluster set unhealthy.
	ExitUnhealthy = 2
	// ExitDenied: `verdict --exit-code` found the flow denied.
	ExitDenied = 2
)

// ExitError is an answer that the process reports through its exit code.
// Its message may be empty: the answer itself was printed already.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// ExitCode maps a command's error to the process exit code: 0 for nil, the
// code of an ExitError, else 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}
