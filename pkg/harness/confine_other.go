//go:build !linux

package harness

import (
	"fmt"
	"os"
)

func canSwitchUser() (bool, string) { return false, "user switching is implemented on Linux only" }

func landlockABI() int { return 0 }

// RunAgentExec is Linux's alone.
func RunAgentExec(args []string) int {
	fmt.Fprintln(os.Stderr, "galley agent-exec: confinement is implemented on Linux only")
	return 126
}
