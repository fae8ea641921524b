package awswire_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awswire"
)

const prefix = "Test_20240101."

type echoIn struct {
	Name  string `json:"name"`
	Count *int   `json:"count"`
}

// testService is a service of one operation, Echo, admitting POSTs that
// carry a caller header.
func testService(rec *awswire.Recorder[awswire.Exchange], faults *awswire.Faults) *awswire.Service {
	return &awswire.Service{
		Name: "Test", TargetPrefix: prefix, ContentType: awswire.ContentTypeJSON11, MaxBody: 64,
		BodyTimeout: 200 * time.Millisecond,
		Admit: func(r *http.Request) (string, *awswire.Error) {
			caller := r.Header.Get("X-Caller")
			switch {
			case r.Method != http.MethodPost:
				return caller, awswire.Errorf(405, "UnknownOperationException", "POST only")
			case caller == "":
				return caller, awswire.Errorf(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
			}
			return caller, nil
		},
		Ops: map[string]awswire.Handler{
			"Echo": awswire.Op(func(in *echoIn) (map[string]any, *awswire.Error) {
				if in.Name == "conflict" {
					return nil, &awswire.Error{Code: "ConflictException", Message: "in use", Fields: map[string]any{"resourceIds": []string{"r-1"}}}
				}
				return map[string]any{"name": in.Name}, nil
			}),
		},
		Faults: faults,
		Record: func(x awswire.Exchange) { rec.Add(x) },
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, method, target, caller, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", awswire.ContentTypeJSON11)
	if target != "" {
		req.Header.Set("X-Amz-Target", target)
	}
	if caller != "" {
		req.Header.Set("X-Caller", caller)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// TestServiceAnswers checks each answer a Service gives, byte for byte
// where the AWS SDK reads it: the routed operation, the refusals in their
// order, an unknown operation, a body that is not the operation's JSON
// (whose message never quotes it), an error with more members, and the
// record of every exchange.
func TestServiceAnswers(t *testing.T) {
	var rec awswire.Recorder[awswire.Exchange]
	srv := httptest.NewServer(testService(&rec, nil))
	defer srv.Close()
	for _, c := range []struct {
		name, method, target, caller, body string
		status                             int
		code, want                         string
	}{
		{"served", "POST", prefix + "Echo", "c-1", `{"name":"x"}`, 200, "", `{"name":"x"}`},
		{"empty body", "POST", prefix + "Echo", "c-1", ``, 200, "", `{"name":""}`},
		{"admit first", "GET", "", "", ``, 405, "UnknownOperationException", `{"__type":"UnknownOperationException","message":"POST only"}`},
		{"admit's order", "POST", "", "", `{}`, 403, "MissingAuthenticationTokenException",
			`{"__type":"MissingAuthenticationTokenException","message":"Missing Authentication Token"}`},
		{"no target", "POST", "", "c-1", `{}`, 400, "UnknownOperationException",
			`{"__type":"UnknownOperationException","message":"no Test operation named in X-Amz-Target"}`},
		{"another service's target", "POST", "Other.Echo", "c-1", `{}`, 400, "UnknownOperationException",
			`{"__type":"UnknownOperationException","message":"no Test operation named in X-Amz-Target"}`},
		{"unknown operation", "POST", prefix + "Delete", "c-1", `{}`, 400, "UnknownOperationException",
			`{"__type":"UnknownOperationException","message":"the stand-in does not serve Delete"}`},
		{"not its JSON", "POST", prefix + "Echo", "c-1", `{"name":"sekrit-value","count":"x"}`, 400, "SerializationException",
			`{"__type":"SerializationException","message":"the body is not the operation's JSON: member count is not a int"}`},
		{"syntax", "POST", prefix + "Echo", "c-1", `{"name":"sekrit-value"`, 400, "SerializationException",
			`{"__type":"SerializationException","message":"the body is not the operation's JSON: syntax error at offset 22"}`},
		{"more members", "POST", prefix + "Echo", "c-1", `{"name":"conflict"}`, 400, "ConflictException",
			`{"__type":"ConflictException","message":"in use","resourceIds":["r-1"]}`},
		{"too large", "POST", prefix + "Echo", "c-1", `{"name":"` + strings.Repeat("a", 64) + `"}`, 413, "SerializationException",
			`{"__type":"SerializationException","message":"the body is larger than 64 bytes"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(rec.All(nil))
			a := post(t, srv.URL, c.method, c.target, c.caller, c.body)
			if a.status != c.status || a.body != c.want {
				t.Errorf("%d %s, want %d %s", a.status, a.body, c.status, c.want)
			}
			if a.header.Get("Content-Type") != awswire.ContentTypeJSON11 || a.header.Get("X-Amzn-Errortype") != c.code ||
				len(a.header.Get("X-Amzn-Requestid")) != 36 {
				t.Errorf("headers %v", a.header)
			}
			got := rec.All(nil)
			if len(got) != before+1 {
				t.Fatalf("%d exchanges recorded, want one more than %d", len(got), before)
			}
			x := got[len(got)-1]
			if x.Status != c.status || x.Code != c.code || x.Caller != c.caller || x.Target != c.target || x.Time.IsZero() {
				t.Errorf("recorded %+v", x)
			}
		})
	}
	if n := len(rec.All(func(x awswire.Exchange) bool { return x.Op == "Echo" })); n != 6 {
		t.Errorf("%d Echo exchanges recorded, want 6", n)
	}
}

// TestServiceFaults checks the fault queue: faults answer in the order
// injected, each for its operation and its count, an answer fault
// answers 200, and Clear ends the ones that last.
func TestServiceFaults(t *testing.T) {
	var rec awswire.Recorder[awswire.Exchange]
	var faults awswire.Faults
	srv := httptest.NewServer(testService(&rec, &faults))
	defer srv.Close()
	echo := func() answer { return post(t, srv.URL, "POST", prefix+"Echo", "c-1", `{"name":"x"}`) }
	faults.Inject(awswire.Fault{Op: "Other", Err: awswire.Errorf(400, "OtherException", "never")})
	faults.Inject(awswire.Fault{Op: "Echo", Times: 2, Err: &awswire.Error{Status: 400, Code: "ThrottlingException", Message: "Rate exceeded", RetryAfter: 3}})
	faults.Inject(awswire.Fault{Times: 1, Out: map[string]any{"failures": []string{"AGENT"}}})
	faults.Inject(awswire.Fault{Err: &awswire.Error{Code: "ServerException", Message: "boom", Status: 500}})
	for i, want := range []answer{
		{400, nil, `{"__type":"ThrottlingException","message":"Rate exceeded"}`},
		{400, nil, `{"__type":"ThrottlingException","message":"Rate exceeded"}`},
		{200, nil, `{"failures":["AGENT"]}`},
		{500, nil, `{"__type":"ServerException","message":"boom"}`},
		{500, nil, `{"__type":"ServerException","message":"boom"}`},
	} {
		a := echo()
		if a.status != want.status || a.body != want.body {
			t.Errorf("call %d: %d %s, want %d %s", i, a.status, a.body, want.status, want.body)
		}
		if retry := a.header.Get("Retry-After"); (i < 2) != (retry == "3") {
			t.Errorf("call %d: Retry-After %q", i, retry)
		}
	}
	faults.Clear()
	if a := echo(); a.status != 200 || a.body != `{"name":"x"}` {
		t.Errorf("after Clear: %d %s", a.status, a.body)
	}
}

// TestServiceBodyTimeout checks that a body that never arrives is cut off
// at the body timeout and refused, and the exchange recorded.
func TestServiceBodyTimeout(t *testing.T) {
	var rec awswire.Recorder[awswire.Exchange]
	srv := httptest.NewServer(testService(&rec, nil))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Caller: c-1\r\nX-Amz-Target: "+prefix+"Echo\r\nContent-Length: 40\r\n\r\n{")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, _ := io.ReadAll(c)
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 400")) || !bytes.Contains(b, []byte("X-Amzn-Errortype: SerializationException")) {
		t.Fatalf("a body that never arrived: %q", b)
	}
	if got := rec.All(nil); len(got) != 1 || got[0].Code != "SerializationException" || got[0].Caller != "c-1" {
		t.Errorf("recorded %+v", got)
	}
}

// TestUUID checks the ids' shape: version 4, RFC 4122 variant, distinct.
func TestUUID(t *testing.T) {
	a, b := awswire.UUID(), awswire.UUID()
	if a == b || len(a) != 36 || a[14] != '4' || !strings.ContainsAny(a[19:20], "89ab") || strings.Count(a, "-") != 4 {
		t.Errorf("UUIDs %s %s", a, b)
	}
}
