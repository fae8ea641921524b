package iampolicy

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustParse(t *testing.T, doc string) Policy {
	t.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse(%s): %v", doc, err)
	}
	return p
}

func TestParseShapes(t *testing.T) {
	p := mustParse(t, `{"Version":"2012-10-17","Statement":{"Sid":"One","Effect":"Allow","Action":"sqs:SendMessage","Resource":["arn:aws:sqs:us-east-1:000000000000:q"],
		"Condition":{"Bool":{"aws:SecureTransport":true},"NumericLessThan":{"n":[1, "2.5"]}}}}`)
	if len(p.Statements) != 1 {
		t.Fatalf("statements = %d, want 1", len(p.Statements))
	}
	st := p.Statements[0]
	if st.Sid != "One" || st.Effect != Allow || st.Actions[0] != "sqs:SendMessage" || len(st.Resources) != 1 {
		t.Fatalf("statement = %+v", st)
	}
	if len(st.Conditions) != 2 || st.Conditions[0].Operator != "Bool" || st.Conditions[0].Values[0] != "true" ||
		st.Conditions[1].Values[0] != "1" || st.Conditions[1].Values[1] != "2.5" {
		t.Fatalf("conditions = %+v", st.Conditions)
	}

	// FromDocument takes what a template loader decoded.
	var doc any
	if err := json.Unmarshal([]byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Deny","NotAction":["s3:*"],"NotResource":"x"}]}`), &doc); err != nil {
		t.Fatal(err)
	}
	p, err := FromDocument(doc)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Statements[0]; st.Effect != Deny || st.NotActions[0] != "s3:*" || st.NotResources[0] != "x" {
		t.Fatalf("statement = %+v", st)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"not json", `{`, "not JSON"},
		{"not an object", `[]`, "not an object"},
		{"no statement", `{"Version":"2012-10-17"}`, "no Statement"},
		{"bad version", `{"Version":"2020-01-01","Statement":[]}`, "Version"},
		{"unknown top-level", `{"Statement":[],"Foo":1}`, "unknown element"},
		{"empty statement list", `{"Statement":[]}`, "empty"},
		{"bad effect", `{"Statement":{"Effect":"allow","Action":"*","Resource":"*"}}`, "Effect"},
		{"principal", `{"Statement":{"Effect":"Allow","Principal":"*","Action":"*","Resource":"*"}}`, "Principal is not supported"},
		{"not principal", `{"Statement":{"Effect":"Allow","NotPrincipal":{"AWS":"x"},"Action":"*","Resource":"*"}}`, "NotPrincipal is not supported"},
		{"both action and notaction", `{"Statement":{"Effect":"Allow","Action":"*","NotAction":"x:y","Resource":"*"}}`, "both Action and NotAction"},
		{"no action", `{"Statement":{"Effect":"Allow","Resource":"*"}}`, "neither Action"},
		{"no resource", `{"Statement":{"Effect":"Allow","Action":"*"}}`, "neither Resource"},
		{"bad action", `{"Statement":{"Effect":"Allow","Action":"PutItem","Resource":"*"}}`, "service:action"},
		{"unresolved intrinsic", `{"Statement":{"Effect":"Allow","Action":"*","Resource":{"Fn::GetAtt":["T","Arn"]}}}`, "not a string"},
		{"unknown operator", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}}`, `"IpAddress" is not supported`},
		{"date operator", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"DateLessThan":{"aws:CurrentTime":"2030-01-01"}}}}`, "not supported"},
		{"null with IfExists", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NullIfExists":{"k":"true"}}}}`, "not supported"},
		{"numeric not a number", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NumericEquals":{"k":"x"}}}}`, "not a number"},
		{"bool not a bool", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Bool":{"k":"yes"}}}}`, "not true or false"},
		{"policy variable in resource", `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:s3:::b/${aws:username}/*"}}`, "policy variables"},
		{"policy variable in condition", `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"k":"${aws:username}"}}}}`, "policy variables"},
		{"condition value object", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"k":{"Ref":"X"}}}}}`, "not a string"},
		{"empty condition key block", `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{}}}}`, "names no key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	// Without Version 2012-10-17, "${" is literal text, as in AWS.
	if _, err := Parse([]byte(`{"Statement":{"Effect":"Allow","Action":"*","Resource":"arn:x:${a}"}}`)); err != nil {
		t.Fatalf("2008 policy with ${: %v", err)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "arn:aws:sqs:us-east-1:1:q", true},
		{"arn:aws:sqs:*", "arn:aws:sqs:us-east-1:1:q", true},
		{"arn:aws:dynamodb:*:*:table/T", "arn:aws:dynamodb:us-east-1:1:table/T", true},
		{"arn:aws:dynamodb:*:*:table/T", "arn:aws:dynamodb:us-east-1:1:table/T/index/I", false},
		{"arn:aws:dynamodb:*:*:table/T/index/*", "arn:aws:dynamodb:us-east-1:1:table/T/index/I", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "aéc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"abc", "ABC", false},
		{"", "", true},
		{"", "a", false},
		{"q-??????", "q-AbCdEf", true},
		{"q-??????", "q-AbCdE", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.s); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

const (
	table   = "arn:aws:dynamodb:us-east-1:000000000000:table/T"
	index   = "arn:aws:dynamodb:us-east-1:000000000000:table/T/index/ByX"
	queue   = "arn:aws:sqs:us-east-1:000000000000:galley-q"
	cluster = "arn:aws:ecs:us-east-1:000000000000:cluster/galley"
)

func TestEvaluate(t *testing.T) {
	ctx := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = append(m[kv[i]], kv[i+1])
		}
		return m
	}
	tests := []struct {
		name     string
		policies []string
		req      Request
		allowed  bool
		explicit bool
		sid      string
	}{
		{"no policy is an implicit deny", nil,
			Request{Action: "dynamodb:PutItem", Resource: table}, false, false, ""},
		{"allow on the exact action and resource",
			[]string{`{"Statement":{"Sid":"Put","Effect":"Allow","Action":"dynamodb:PutItem","Resource":"` + table + `"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, true, false, "Put"},
		{"action matches case-insensitively",
			[]string{`{"Statement":{"Effect":"Allow","Action":"DynamoDB:putitem","Resource":"` + table + `"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, true, false, ""},
		{"action wildcard",
			[]string{`{"Statement":{"Effect":"Allow","Action":["dynamodb:Get*","dynamodb:Put?tem"],"Resource":"*"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, true, false, ""},
		{"action wildcard does not cross services",
			[]string{`{"Statement":{"Effect":"Allow","Action":"sqs:*","Resource":"*"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, false, false, ""},
		{"resource is case-sensitive",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:dynamodb:us-east-1:000000000000:table/t"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, false, false, ""},
		{"table grant does not cover its index",
			[]string{`{"Statement":{"Effect":"Allow","Action":"dynamodb:Query","Resource":"` + table + `"}}`},
			Request{Action: "dynamodb:Query", Resource: index}, false, false, ""},
		{"index wildcard",
			[]string{`{"Statement":{"Effect":"Allow","Action":"dynamodb:Query","Resource":["` + table + `","` + table + `/index/*"]}}`},
			Request{Action: "dynamodb:Query", Resource: index}, true, false, ""},
		{"explicit deny wins over allow in another policy",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*"}}`,
				`{"Statement":{"Sid":"NoDelete","Effect":"Deny","Action":"dynamodb:DeleteItem","Resource":"*"}}`},
			Request{Action: "dynamodb:DeleteItem", Resource: table}, false, true, "NoDelete"},
		{"NotAction allows the rest",
			[]string{`{"Statement":{"Effect":"Allow","NotAction":"dynamodb:DeleteItem","Resource":"*"}}`},
			Request{Action: "dynamodb:DeleteItem", Resource: table}, false, false, ""},
		{"NotAction allows other actions",
			[]string{`{"Statement":{"Effect":"Allow","NotAction":"dynamodb:DeleteItem","Resource":"*"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, true, false, ""},
		{"NotResource",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","NotResource":"` + table + `"}}`},
			Request{Action: "dynamodb:PutItem", Resource: table}, false, false, ""},
		{"deny with a condition that fails does not apply",
			[]string{`{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}`},
			Request{Action: "sqs:SendMessage", Resource: queue, Context: ctx("aws:SecureTransport", "true")}, true, false, ""},
		{"deny with a condition that holds",
			[]string{`{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},{"Sid":"TLS","Effect":"Deny","Action":"*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}`},
			Request{Action: "sqs:SendMessage", Resource: queue, Context: ctx("aws:SecureTransport", "false")}, false, true, "TLS"},
		{"Bool true over plain HTTP",
			[]string{`{"Statement":{"Effect":"Allow","Action":"sqs:*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"true"}}}}`},
			Request{Action: "sqs:SendMessage", Resource: queue, Context: ctx("aws:SecureTransport", "false")}, false, false, ""},
		{"Bool true over TLS",
			[]string{`{"Statement":{"Effect":"Allow","Action":"sqs:*","Resource":"*","Condition":{"Bool":{"aws:SecureTransport":"true"}}}}`},
			Request{Action: "sqs:SendMessage", Resource: queue, Context: ctx("aws:SecureTransport", "true")}, true, false, ""},
		{"condition key names are case-insensitive",
			[]string{`{"Statement":{"Effect":"Allow","Action":"sqs:*","Resource":"*","Condition":{"Bool":{"AWS:securetransport":"true"}}}}`},
			Request{Action: "sqs:SendMessage", Resource: queue, Context: ctx("aws:SecureTransport", "true")}, true, false, ""},
		{"missing key makes a condition false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"ecs:cluster":"` + cluster + `"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "x"}, false, false, ""},
		{"missing key makes a negated condition true (AWS: the key does not match)",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotEquals":{"ecs:cluster":"other"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "x"}, true, false, ""},
		{"a Deny with a negated condition on a missing key denies",
			[]string{`{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},` +
				`{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"StringNotEquals":{"aws:SourceVpce":"vpce-1"}}}]}`},
			Request{Action: "ecs:RunTask", Resource: "x"}, false, true, ""},
		{"ForAnyValue with a negated operator on a missing key is false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringNotEquals":{"k":"a"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "x"}, false, false, ""},
		{"IfExists holds on a missing key",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualsIfExists":{"ecs:cluster":"` + cluster + `"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "x"}, true, false, ""},
		{"IfExists still compares a present key",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualsIfExists":{"ecs:cluster":"` + cluster + `"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "x", Context: ctx("ecs:cluster", "other")}, false, false, ""},
		{"StringEquals with one of several values",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"iam:PassedToService":["lambda.amazonaws.com","ecs-tasks.amazonaws.com"]}}}}`},
			Request{Action: "iam:PassRole", Resource: "r", Context: ctx("iam:PassedToService", "ecs-tasks.amazonaws.com")}, true, false, ""},
		{"StringEquals is case-sensitive",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"ecs:CreateAction":"runtask"}}}}`},
			Request{Action: "ecs:TagResource", Resource: "r", Context: ctx("ecs:CreateAction", "RunTask")}, false, false, ""},
		{"StringEqualsIgnoreCase",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqualsIgnoreCase":{"ecs:CreateAction":"runtask"}}}}`},
			Request{Action: "ecs:TagResource", Resource: "r", Context: ctx("ecs:CreateAction", "RunTask")}, true, false, ""},
		{"StringNotEquals holds when no value matches",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotEquals":{"k":["a","b"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("k", "c")}, true, false, ""},
		{"StringNotEquals fails when one value matches",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotEquals":{"k":["a","b"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("k", "b")}, false, false, ""},
		{"StringLike",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringLike":{"k":"galley-*"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("k", "galley-q")}, true, false, ""},
		{"StringNotLike",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringNotLike":{"k":"galley-*"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("k", "galley-q")}, false, false, ""},
		{"ArnEquals",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnEquals":{"ecs:cluster":"` + cluster + `"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "r", Context: ctx("ecs:cluster", cluster)}, true, false, ""},
		{"ArnLike matches part by part",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnLike":{"ecs:cluster":"arn:aws:ecs:*:*:cluster/gal*"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "r", Context: ctx("ecs:cluster", cluster)}, true, false, ""},
		{"ArnLike: a wildcard stays inside its part",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnLike":{"ecs:cluster":"arn:aws:ecs:*:cluster/galley"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "r", Context: ctx("ecs:cluster", cluster)}, false, false, ""},
		{"ArnNotEquals",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnNotEquals":{"ecs:cluster":"` + cluster + `"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "r", Context: ctx("ecs:cluster", cluster)}, false, false, ""},
		{"ArnNotLike on another cluster",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ArnNotLike":{"ecs:cluster":"` + cluster + `"}}}}`},
			Request{Action: "ecs:RunTask", Resource: "r", Context: ctx("ecs:cluster", cluster+"2")}, true, false, ""},
		{"Null true: key absent",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Null":{"aws:username":"true"}}}}`},
			Request{Action: "x:y", Resource: "r"}, true, false, ""},
		{"Null true: key present",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Null":{"aws:username":"true"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:username", "u")}, false, false, ""},
		{"Null false: key present",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"Null":{"aws:username":false}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:username", "u")}, true, false, ""},
		{"NumericLessThan",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NumericLessThan":{"n":10}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("n", "9.5")}, true, false, ""},
		{"NumericGreaterThanEquals fails below",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NumericGreaterThanEquals":{"n":"10"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("n", "9")}, false, false, ""},
		{"Numeric on a non-number request value",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NumericEquals":{"n":"1"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("n", "one")}, false, false, ""},
		{"NumericNotEquals",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"NumericNotEquals":{"n":[1,2]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("n", "3")}, true, false, ""},
		{"keys in a block are ANDed",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"a":"1","b":"2"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("a", "1", "b", "3")}, false, false, ""},
		{"operators are ANDed",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"a":"1"},"Bool":{"b":"true"}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("a", "1", "b", "true")}, true, false, ""},
		{"ForAnyValue: one of the request values",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":["house"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:TagKeys", "run", "aws:TagKeys", "house")}, true, false, ""},
		{"ForAnyValue: missing key is false",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEquals":{"aws:TagKeys":["house"]}}}}`},
			Request{Action: "x:y", Resource: "r"}, false, false, ""},
		{"ForAllValues: every request value",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAllValues:StringEquals":{"aws:TagKeys":["house","run"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:TagKeys", "run", "aws:TagKeys", "house")}, true, false, ""},
		{"ForAllValues: one value outside",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAllValues:StringEquals":{"aws:TagKeys":["house"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:TagKeys", "run", "aws:TagKeys", "house")}, false, false, ""},
		{"ForAllValues: missing key is true, as in AWS",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAllValues:StringEquals":{"aws:TagKeys":["house"]}}}}`},
			Request{Action: "x:y", Resource: "r"}, true, false, ""},
		{"ForAllValues with a negated operator",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAllValues:StringNotLike":{"aws:TagKeys":["aws:*"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:TagKeys", "run", "aws:TagKeys", "aws:x")}, false, false, ""},
		{"ForAnyValue with a negated operator",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringNotLike":{"aws:TagKeys":["aws:*"]}}}}`},
			Request{Action: "x:y", Resource: "r", Context: ctx("aws:TagKeys", "run", "aws:TagKeys", "aws:x")}, true, false, ""},
		{"ForAnyValue IfExists on a missing key",
			[]string{`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"ForAnyValue:StringEqualsIfExists":{"aws:TagKeys":["house"]}}}}`},
			Request{Action: "x:y", Resource: "r"}, true, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []Policy
			for _, d := range tt.policies {
				ps = append(ps, mustParse(t, d))
			}
			d := Evaluate(ps, tt.req)
			if d.Allowed != tt.allowed || d.Explicit != tt.explicit || d.Sid != tt.sid {
				t.Fatalf("Evaluate = %+v, want allowed %v explicit %v sid %q", d, tt.allowed, tt.explicit, tt.sid)
			}
			if !d.Allowed && !d.Explicit && (d.Policy != -1 || d.Statement != -1) {
				t.Fatalf("implicit deny names statement %d/%d", d.Policy, d.Statement)
			}
		})
	}
}
