//go:build !linux

package harness

import (
	"context"
	"errors"
)

// agentGroup is Linux's alone.
type agentGroup struct{ dirs []string }

func newAgentGroup(string, uint64, int64) (*agentGroup, error) {
	return nil, errors.New("cgroups are Linux's")
}

func (*agentGroup) add(int) error             { return errors.New("cgroups are Linux's") }
func (*agentGroup) end(context.Context) error { return nil }
