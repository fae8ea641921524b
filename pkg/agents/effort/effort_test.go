package effort

import (
	"slices"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

func TestValues(t *testing.T) {
	cases := []struct {
		family, model string
		want          []string
	}{
		{Claude, "", []string{"low", "medium", "high", "xhigh", "max"}},
		{Claude, "claude-opus-5-5", []string{"low", "medium", "high", "xhigh", "max"}},
		{Codex, "", []string{"low", "medium", "high", "xhigh", "max"}},
		{Codex, CodexDefaultModel, []string{"low", "medium", "high", "xhigh", "max"}},
		{Codex, "gpt-5.5", []string{"low", "medium", "high", "xhigh"}},
		{Codex, "unknown-model", []string{"low", "medium", "high", "xhigh"}},
		{"script", "", nil},
	}
	for _, tc := range cases {
		if got := Values(tc.family, tc.model); !slices.Equal(got, tc.want) {
			t.Errorf("Values(%q, %q) = %v, want %v", tc.family, tc.model, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := Check(Codex, "gpt-5.5", ""); err != nil {
		t.Errorf("no effort: %v", err)
	}
	if err := Check("script", "", "turbo"); err != nil {
		t.Errorf("a family without a table: %v", err)
	}
	err := Check(Codex, "gpt-5.5", "max")
	if !galleyerr.Is(galleyerr.Invalid, err) || !strings.Contains(err.Error(), `codex cannot honour effort "max" with model gpt-5.5 (it takes low, medium, high, xhigh)`) {
		t.Errorf("max on gpt-5.5: %v", err)
	}
	err = Check(Codex, "", "minimal")
	if !galleyerr.Is(galleyerr.Invalid, err) || !strings.Contains(err.Error(), "with its default model") {
		t.Errorf("minimal: %v", err)
	}
}
