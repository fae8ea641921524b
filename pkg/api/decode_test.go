package api

import (
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"kind":"status","body":"x"}`, true},
		{``, true}, // an empty body is an empty object
		{`{"kind":"status"}]`, false},
		{`{"kind":"status"}}`, false},
		{`{"kind":"status"} {}`, false},
		{`{"kind":"status","extra":1}`, false},
		{`[1]`, false},
	} {
		var req workerapi.PostRequest
		err := decodeStrict([]byte(tc.body), &req)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok=%v", tc.body, err, tc.ok)
		}
		if err != nil && !galleyerr.Is(galleyerr.Malformed, err) {
			t.Errorf("%q: kind %v, want malformed", tc.body, galleyerr.KindOf(err))
		}
	}
}
