package cfntemplate

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const sample = `{
 "Parameters": {"Stage": {"Type": "String", "Default": "prod"}, "Free": {"Type": "String"}},
 "Conditions": {"IsProd": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}, "NotProd": {"Fn::Not": [{"Condition": "IsProd"}]}},
 "Mappings": {"M": {"us-east-1": {"Name": "virginia"}}},
 "Resources": {
  "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
  "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
  "Fn": {"Type": "AWS::Lambda::Function", "DependsOn": "Role", "Properties": {
    "Environment": {"Variables": {
      "TABLE": {"Ref": "Table"},
      "ARN": {"Fn::GetAtt": ["Table", "Arn"]},
      "JOINED": {"Fn::Join": ["", [{"Fn::GetAtt": ["Table", "Arn"]}, "/index/*"]]},
      "SUB": {"Fn::Sub": "arn:${AWS::Partition}:x:${AWS::Region}:${AWS::AccountId}:t/${Table}/${Table.Arn}/${!Literal}"},
      "SUB2": {"Fn::Sub": ["${A}-${Stage}", {"A": {"Ref": "Table"}}]},
      "SEL": {"Fn::Select": [1, {"Fn::Split": [",", "a,b,c"]}]},
      "AZ": {"Fn::Select": [0, {"Fn::GetAZs": ""}]},
      "IF": {"Fn::If": ["IsProd", "yes", "no"]},
      "MAP": {"Fn::FindInMap": ["M", {"Ref": "AWS::Region"}, "Name"]},
      "GONE": {"Fn::If": ["NotProd", "x", {"Ref": "AWS::NoValue"}]}
    }},
    "Role": {"Fn::GetAtt": ["Role", "Arn"]}
  }},
  "Bad": {"Type": "Custom::X", "Properties": {"V": {"Fn::ImportValue": "other"}, "P": {"Ref": "Free"}}}
 }
}`

type fakeDeploy map[string]string

func (f fakeDeploy) Ref(id string) (string, error) {
	if v, ok := f[id]; ok {
		return v, nil
	}
	return "", fmt.Errorf("%s not deployed", id)
}

func (f fakeDeploy) GetAtt(id, attr string) (any, error) {
	if v, ok := f[id+"."+attr]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("%s has no attribute %s", id, attr)
}

func resolver(t *testing.T) *Resolver {
	t.Helper()
	tpl, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	return &Resolver{T: tpl, Region: "us-east-1", AccountID: "000000000000", Partition: "aws",
		Deploy: fakeDeploy{"Table": "tbl", "Table.Arn": "arn:aws:dynamodb:us-east-1:000000000000:table/tbl",
			"Role": "role", "Role.Arn": "arn:aws:iam::000000000000:role/role"}}
}

func TestResolveIntrinsics(t *testing.T) {
	r := resolver(t)
	v, err := r.Property("Fn", "Environment.Variables")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"TABLE":  "tbl",
		"ARN":    "arn:aws:dynamodb:us-east-1:000000000000:table/tbl",
		"JOINED": "arn:aws:dynamodb:us-east-1:000000000000:table/tbl/index/*",
		"SUB":    "arn:aws:x:us-east-1:000000000000:t/tbl/arn:aws:dynamodb:us-east-1:000000000000:table/tbl/${Literal}",
		"SUB2":   "tbl-prod",
		"SEL":    "b",
		"AZ":     "us-east-1a",
		"IF":     "yes",
		"MAP":    "virginia",
	}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("resolved\n%v\nwant\n%v", v, want)
	}
	r.Params = map[string]string{"Stage": "dev"}
	v, err = r.Property("Fn", "Environment.Variables")
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["IF"] != "no" || m["GONE"] != "x" || m["SUB2"] != "tbl-dev" {
		t.Fatalf("with Stage=dev: IF=%v GONE=%v SUB2=%v", m["IF"], m["GONE"], m["SUB2"])
	}
}

func TestResolveErrorsNameThePlace(t *testing.T) {
	r := resolver(t)
	for _, c := range []struct{ prop, want string }{
		{"V", "Resources.Bad.Properties.V: Fn::ImportValue: Fn::ImportValue is not supported"},
		{"P", "Resources.Bad.Properties.P: Ref: parameter Free has no value"},
	} {
		_, err := r.Property("Bad", c.prop)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.prop, err, c.want)
		}
	}
	delete(r.Deploy.(fakeDeploy), "Table.Arn")
	_, err := r.Property("Fn", "Environment.Variables")
	if err == nil || !strings.Contains(err.Error(), "Resources.Fn.Properties.Environment.Variables.ARN") || !strings.Contains(err.Error(), "no attribute Arn") {
		t.Fatalf("missing attribute: %v", err)
	}
}

func TestOrder(t *testing.T) {
	tpl, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	order, err := tpl.Order()
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	if len(order) != 4 || pos["Fn"] < pos["Table"] || pos["Fn"] < pos["Role"] {
		t.Fatalf("order %v: Fn must come after Table and Role", order)
	}
	cyc, err := Parse([]byte(`{"Resources": {"A": {"Type": "X", "Properties": {"B": {"Ref": "B"}}},
		"B": {"Type": "X", "Properties": {"A": {"Fn::Sub": "${A.Arn}"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cyc.Order(); err == nil || !strings.Contains(err.Error(), "circular dependency: A -> B -> A") {
		t.Fatalf("cycle: %v", err)
	}
	if got := tpl.OfType("AWS::IAM::Role"); !reflect.DeepEqual(got, []string{"Role"}) {
		t.Fatalf("OfType: %v", got)
	}
}
