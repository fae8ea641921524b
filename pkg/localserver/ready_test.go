package localserver_test

import (
	"bufio"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/localserver"
)

// ParseLine reads back what PrintReady writes.
func TestReadyRoundTrip(t *testing.T) {
	var out strings.Builder
	o := localserver.Options{House: "h1", Backend: "galley", Credential: "galley-token", OperatorTokenFile: "/d/operator-token"}
	localserver.PrintReady(&out, o, "http://127.0.0.1:8080", "/d/token")
	var r localserver.Ready
	for sc := bufio.NewScanner(strings.NewReader(out.String())); sc.Scan(); {
		r.ParseLine(sc.Text())
	}
	want := localserver.Ready{House: "h1", Backend: "galley", Endpoint: "http://127.0.0.1:8080", TokenFile: "/d/token", OperatorTokenFile: "/d/operator-token"}
	if r != want {
		t.Errorf("read back %+v, want %+v", r, want)
	}
}
