package iampolicy

import (
	"strings"
	"testing"
)

func TestTrustPolicy(t *testing.T) {
	const (
		role    = "arn:aws:iam::000000000000:role/galley-workerapi"
		session = "arn:aws:sts::000000000000:assumed-role/galley-workerapi/s"
		root    = "arn:aws:iam::000000000000:root"
	)
	caller := Caller{"AWS": {role, session, root}}
	other := Caller{"AWS": {"arn:aws:iam::000000000000:role/other", "arn:aws:sts::000000000000:assumed-role/other/s", root}}
	foreign := Caller{"AWS": {"arn:aws:iam::111111111111:role/x", "arn:aws:sts::111111111111:assumed-role/x/s", "arn:aws:iam::111111111111:root"}}
	assume := Request{Action: "sts:AssumeRole", Context: map[string][]string{"sts:RoleSessionName": {"worker-1"}}}
	for _, c := range []struct {
		name, doc string
		who       Caller
		allowed   bool
		explicit  bool
	}{
		{"role named", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"` + role + `"},"Action":"sts:AssumeRole"}}`, caller, true, false},
		{"another role", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"` + role + `"},"Action":"sts:AssumeRole"}}`, other, false, false},
		{"account id is its root", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"000000000000"},"Action":"sts:AssumeRole"}}`, other, true, false},
		{"other account", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"` + root + `"},"Action":"sts:AssumeRole"}}`, foreign, false, false},
		{"everyone", `{"Statement":{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole"}}`, foreign, true, false},
		{"service only", `{"Statement":{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}}`, caller, false, false},
		{"other action", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"` + role + `"},"Action":"sts:TagSession"}}`, caller, false, false},
		{"condition holds", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"` + role + `"},"Action":"sts:AssumeRole","Condition":{"StringLike":{"sts:RoleSessionName":"worker-*"}}}}`, caller, true, false},
		{"condition fails", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"` + role + `"},"Action":"sts:AssumeRole","Condition":{"StringEquals":{"sts:RoleSessionName":"x"}}}}`, caller, false, false},
		{"deny wins", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:*"},{"Effect":"Deny","Principal":{"AWS":"` + session + `"},"Action":"sts:AssumeRole"}]}`, caller, false, true},
		{"not principal", `{"Statement":{"Effect":"Allow","NotPrincipal":{"AWS":"` + role + `"},"Action":"sts:AssumeRole"}}`, caller, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseTrust([]byte(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			d := p.Evaluate(c.who, assume)
			if d.Allowed != c.allowed || d.Explicit != c.explicit {
				t.Fatalf("decision %+v, want allowed %v explicit %v", d, c.allowed, c.explicit)
			}
		})
	}
	for _, c := range []struct{ name, doc, want string }{
		{"no principal", `{"Statement":{"Effect":"Allow","Action":"sts:AssumeRole"}}`, "neither Principal nor NotPrincipal"},
		{"resource", `{"Statement":{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole","Resource":"*"}}`, "prohibited field Resource"},
		{"partial wildcard", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::*:root"},"Action":"sts:AssumeRole"}}`, "without wildcards"},
		{"bad type", `{"Statement":{"Effect":"Allow","Principal":{"Users":"x"},"Action":"sts:AssumeRole"}}`, "principal type"},
		{"bad version", `{"Version":"2020-01-01","Statement":{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole"}}`, "Version"},
		{"not an arn", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"galley"},"Action":"sts:AssumeRole"}}`, "invalid principal"},
	} {
		if _, err := ParseTrust([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	// An identity-based policy still may not name a principal.
	if _, err := Parse([]byte(`{"Statement":{"Effect":"Allow","Principal":"*","Action":"*","Resource":"*"}}`)); err == nil {
		t.Fatal("Parse took a Principal")
	}
}
