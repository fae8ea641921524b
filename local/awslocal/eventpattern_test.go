package awslocal

import "testing"

func TestMatchPattern(t *testing.T) {
	pattern := map[string]any{
		"source":      []any{"aws.ecs"},
		"detail-type": []any{"ECS Task State Change"},
		"detail": map[string]any{
			"clusterArn": []any{"arn:aws:ecs:us-east-1:000000000000:cluster/c"},
			"group":      []any{map[string]any{"prefix": "family:"}},
			"stopCode":   []any{map[string]any{"anything-but": []any{"UserInitiated"}}, map[string]any{"exists": false}},
		},
	}
	for _, c := range []struct {
		name, event string
		want        bool
	}{
		{"match", `{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/c","group":"family:w"}}`, true},
		{"other cluster", `{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/d","group":"family:w"}}`, false},
		{"other source", `{"source":"aws.events","detail-type":"ECS Task State Change","detail":{"clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/c","group":"family:w"}}`, false},
		{"missing detail field", `{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"group":"family:w"}}`, false},
		{"prefix fails", `{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/c","group":"service:w"}}`, false},
		{"anything-but fails", `{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/c","group":"family:w","stopCode":"UserInitiated"}}`, false},
		{"anything-but passes", `{"source":"aws.ecs","detail-type":"ECS Task State Change","detail":{"clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/c","group":"family:w","stopCode":"EssentialContainerExited"}}`, true},
	} {
		got, err := matchPattern(pattern, []byte(c.event))
		if err != nil || got != c.want {
			t.Errorf("%s: match %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := matchPattern(map[string]any{"detail": map[string]any{"n": []any{map[string]any{"numeric": []any{">", 1}}}}},
		[]byte(`{"detail":{"n":2}}`)); err == nil {
		t.Error("an unsupported filter must be an error")
	}
}
