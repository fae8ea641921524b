package iamgate

import (
	"encoding/json"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// check is one authorization a request needs: an action on a resource,
// with condition keys beyond the request-wide ones.
type check struct {
	action   string
	resource string // evaluated
	shown    string // as the service names it in a denial; resource if empty
	context  map[string][]string
}

// mapping is what a request needs authorized, or why it cannot be mapped;
// after is answered once every check passed (ECS RunTask with a task
// definition nobody knows); free marks an operation AWS never denies
// (sts:GetCallerIdentity, named by freeAction), which has no check.
type mapping struct {
	checks     []check
	after      *awsError
	free       bool
	freeAction string
}

// mapper maps one operation's body to its checks.
type mapper func(g *Gate, body []byte) (mapping, *awsError)

func (g *Gate) arn(service, resource string) string {
	return "arn:aws:" + service + ":" + g.region + ":" + g.account + ":" + resource
}

func (g *Gate) decode(body []byte, v any) *awsError {
	if len(body) == 0 {
		body = []byte("{}")
	}
	// encoding/json matches member names without regard to case and keeps
	// the last of equal ones, while the services read names exactly: a
	// body naming a field the gate reads in another case ("tableName"
	// beside "TableName", "put" beside "Put") would be checked as one
	// request and served as another. Such a body is refused.
	if name, bad := caseMismatch(body, reflect.TypeOf(v)); bad {
		e := g.proto.refused(g.serializationType(), "member "+strconv.Quote(name)+" differs from the operation's member only in case")
		e.queryCode = "SerializationException"
		return &e
	}
	if err := json.Unmarshal(body, v); err != nil {
		e := g.proto.refused(g.serializationType(), "the request body is not a JSON object of the operation's input")
		e.queryCode = "SerializationException"
		return &e
	}
	return nil
}

func (g *Gate) serializationType() string {
	if g.service == DynamoDB || g.service == SQS {
		return "com.amazon.coral.service#SerializationException"
	}
	return "SerializationException"
}

// caseMismatch walks a JSON body alongside the Go type the gate decodes
// it into and reports a member name that encoding/json would fold onto one
// of the type's fields although it differs in case. Members the type does
// not read, and the keys of maps (table names), are data: not checked.
func caseMismatch(body []byte, t reflect.Type) (string, bool) {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return "", false // a malformed body is Unmarshal's to refuse
	}
	return mismatchIn(doc, t)
}

func mismatchIn(v any, t reflect.Type) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if l, ok := v.([]any); ok {
			for _, e := range l {
				if name, bad := mismatchIn(e, t.Elem()); bad {
					return name, true
				}
			}
		}
	case reflect.Map:
		if m, ok := v.(map[string]any); ok {
			for _, e := range m {
				if name, bad := mismatchIn(e, t.Elem()); bad {
					return name, true
				}
			}
		}
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Name
			if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
				name = tag
			}
			fields[name] = f.Type
		}
		for k, e := range m {
			if ft, ok := fields[k]; ok {
				if name, bad := mismatchIn(e, ft); bad {
					return name, true
				}
				continue
			}
			for name := range fields {
				if strings.EqualFold(name, k) {
					return k, true
				}
			}
		}
	}
	return "", false
}

func (g *Gate) missing(param string) *awsError {
	typ := "ValidationException"
	switch g.service {
	case DynamoDB:
		typ = "com.amazon.coral.validate#ValidationException"
	case SQS:
		typ = "com.amazonaws.sqs#MissingParameter"
	case SecretsManager:
		typ = "InvalidParameterException"
	case ECS:
		typ = "InvalidParameterException"
	case STS:
		typ = "ValidationError"
	}
	e := g.proto.refused(typ, "1 validation error detected: Value null at '"+param+"' failed to satisfy constraint: Member must not be null")
	if g.service == SQS {
		e.queryCode = "MissingParameter"
	}
	return &e
}

// --- DynamoDB ---------------------------------------------------------

func (g *Gate) tableARN(name string) string {
	if strings.HasPrefix(name, "arn:") {
		return name
	}
	return g.arn("dynamodb", "table/"+name)
}

var dynamoOps = map[string]mapper{
	"GetItem":            dynamoTable("dynamodb:GetItem"),
	"PutItem":            dynamoTable("dynamodb:PutItem"),
	"UpdateItem":         dynamoTable("dynamodb:UpdateItem"),
	"DeleteItem":         dynamoTable("dynamodb:DeleteItem"),
	"DescribeTable":      dynamoTable("dynamodb:DescribeTable"),
	"DeleteTable":        dynamoTable("dynamodb:DeleteTable"),
	"UpdateTable":        dynamoTable("dynamodb:UpdateTable"),
	"UpdateTimeToLive":   dynamoTable("dynamodb:UpdateTimeToLive"),
	"DescribeTimeToLive": dynamoTable("dynamodb:DescribeTimeToLive"),
	"CreateTable":        dynamoCreateTable,
	"Query":              dynamoIndexed("dynamodb:Query"),
	"Scan":               dynamoIndexed("dynamodb:Scan"),
	"ListTables":         star("dynamodb:ListTables"),
	"BatchGetItem":       dynamoBatch("dynamodb:BatchGetItem"),
	"BatchWriteItem":     dynamoBatch("dynamodb:BatchWriteItem"),
	"TransactWriteItems": dynamoTransactWrite,
	"TransactGetItems":   dynamoTransactGet,
}

type tableInput struct {
	TableName string
	IndexName string
	Tags      []json.RawMessage
}

// table decodes a single-table request and returns it with its table's
// ARN, or the service's answer to a body without a table.
func (g *Gate) table(body []byte) (tableInput, string, *awsError) {
	var in tableInput
	if e := g.decode(body, &in); e != nil {
		return in, "", e
	}
	if in.TableName == "" {
		return in, "", g.missing("tableName")
	}
	return in, g.tableARN(in.TableName), nil
}

func dynamoTable(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		_, t, e := g.table(body)
		if e != nil {
			return mapping{}, e
		}
		return mapping{checks: []check{{action: action, resource: t}}}, nil
	}
}

// dynamoCreateTable: tags on create also need dynamodb:TagResource.
func dynamoCreateTable(g *Gate, body []byte) (mapping, *awsError) {
	in, t, e := g.table(body)
	if e != nil {
		return mapping{}, e
	}
	m := mapping{checks: []check{{action: "dynamodb:CreateTable", resource: t}}}
	if len(in.Tags) > 0 {
		m.checks = append(m.checks, check{action: "dynamodb:TagResource", resource: t})
	}
	return m, nil
}

// dynamoIndexed: a Query or Scan of an index is authorized on the index.
func dynamoIndexed(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		in, r, e := g.table(body)
		if e != nil {
			return mapping{}, e
		}
		if in.IndexName != "" {
			r += "/index/" + in.IndexName
		}
		return mapping{checks: []check{{action: action, resource: r}}}, nil
	}
}

// dynamoBatch: a batch is authorized once per table it names, in table
// order.
func dynamoBatch(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		var in struct{ RequestItems map[string]json.RawMessage }
		if e := g.decode(body, &in); e != nil {
			return mapping{}, e
		}
		if len(in.RequestItems) == 0 {
			return mapping{}, g.missing("requestItems")
		}
		tables := make([]string, 0, len(in.RequestItems))
		for t := range in.RequestItems {
			tables = append(tables, t)
		}
		sort.Strings(tables)
		var m mapping
		for _, t := range tables {
			m.checks = append(m.checks, check{action: action, resource: g.tableARN(t)})
		}
		return m, nil
	}
}

// dynamoTransactWrite: each item needs its own action on its table.
func dynamoTransactWrite(g *Gate, body []byte) (mapping, *awsError) {
	var in struct {
		TransactItems []struct {
			ConditionCheck, Put, Delete, Update *tableInput
		}
	}
	if e := g.decode(body, &in); e != nil {
		return mapping{}, e
	}
	if len(in.TransactItems) == 0 {
		return mapping{}, g.missing("transactItems")
	}
	var m mapping
	for _, it := range in.TransactItems {
		for _, x := range []struct {
			t      *tableInput
			action string
		}{
			{it.ConditionCheck, "dynamodb:ConditionCheckItem"},
			{it.Put, "dynamodb:PutItem"},
			{it.Delete, "dynamodb:DeleteItem"},
			{it.Update, "dynamodb:UpdateItem"},
		} {
			if x.t == nil {
				continue
			}
			if x.t.TableName == "" {
				return mapping{}, g.missing("transactItems.member.tableName")
			}
			m.checks = append(m.checks, check{action: x.action, resource: g.tableARN(x.t.TableName)})
		}
	}
	return m, nil
}

func dynamoTransactGet(g *Gate, body []byte) (mapping, *awsError) {
	var in struct{ TransactItems []struct{ Get *tableInput } }
	if e := g.decode(body, &in); e != nil {
		return mapping{}, e
	}
	if len(in.TransactItems) == 0 {
		return mapping{}, g.missing("transactItems")
	}
	var m mapping
	for _, it := range in.TransactItems {
		if it.Get == nil || it.Get.TableName == "" {
			return mapping{}, g.missing("transactItems.member.get.tableName")
		}
		m.checks = append(m.checks, check{action: "dynamodb:GetItem", resource: g.tableARN(it.Get.TableName)})
	}
	return m, nil
}

func star(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		var in map[string]any
		if e := g.decode(body, &in); e != nil {
			return mapping{}, e
		}
		return mapping{checks: []check{{action: action, resource: "*"}}}, nil
	}
}

// --- SQS --------------------------------------------------------------

var sqsOps = map[string]mapper{
	"SendMessage":                  sqsByURL("sqs:SendMessage"),
	"SendMessageBatch":             sqsByURL("sqs:SendMessage"),
	"ReceiveMessage":               sqsByURL("sqs:ReceiveMessage"),
	"DeleteMessage":                sqsByURL("sqs:DeleteMessage"),
	"DeleteMessageBatch":           sqsByURL("sqs:DeleteMessage"),
	"ChangeMessageVisibility":      sqsByURL("sqs:ChangeMessageVisibility"),
	"ChangeMessageVisibilityBatch": sqsByURL("sqs:ChangeMessageVisibility"),
	"GetQueueAttributes":           sqsByURL("sqs:GetQueueAttributes"),
	"SetQueueAttributes":           sqsByURL("sqs:SetQueueAttributes"),
	"PurgeQueue":                   sqsByURL("sqs:PurgeQueue"),
	"DeleteQueue":                  sqsByURL("sqs:DeleteQueue"),
	"TagQueue":                     sqsByURL("sqs:TagQueue"),
	"UntagQueue":                   sqsByURL("sqs:UntagQueue"),
	"ListQueueTags":                sqsByURL("sqs:ListQueueTags"),
	"ListDeadLetterSourceQueues":   sqsByURL("sqs:ListDeadLetterSourceQueues"),
	"CreateQueue":                  sqsCreateQueue,
	"GetQueueUrl":                  sqsByName("sqs:GetQueueUrl"),
	// ListQueues names no queue: SQS gives it no resource type, so IAM
	// evaluates it against "*" and only Resource "*" allows it.
	"ListQueues": star("sqs:ListQueues"),
}

type queueInput struct {
	QueueURL  string `json:"QueueUrl"`
	QueueName string
	Tags      map[string]string `json:"tags"`
}

func sqsByURL(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		var in queueInput
		if e := g.decode(body, &in); e != nil {
			return mapping{}, e
		}
		u, err := url.Parse(in.QueueURL)
		name := ""
		if err == nil {
			name = u.Path[strings.LastIndex(u.Path, "/")+1:]
		}
		if name == "" {
			return mapping{}, g.missing("QueueUrl")
		}
		return mapping{checks: []check{{action: action, resource: g.arn("sqs", name)}}}, nil
	}
}

func sqsByName(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		var in queueInput
		if e := g.decode(body, &in); e != nil {
			return mapping{}, e
		}
		if in.QueueName == "" {
			return mapping{}, g.missing("QueueName")
		}
		return mapping{checks: []check{{action: action, resource: g.arn("sqs", in.QueueName)}}}, nil
	}
}

// sqsCreateQueue: tagging on create also needs sqs:TagQueue.
func sqsCreateQueue(g *Gate, body []byte) (mapping, *awsError) {
	m, e := sqsByName("sqs:CreateQueue")(g, body)
	if e != nil {
		return m, e
	}
	var in queueInput
	_ = json.Unmarshal(body, &in)
	if len(in.Tags) > 0 {
		m.checks = append(m.checks, check{action: "sqs:TagQueue", resource: m.checks[0].resource})
	}
	return m, nil
}

// --- Secrets Manager --------------------------------------------------

var secretsOps = map[string]mapper{
	"GetSecretValue":           secretByID("secretsmanager:GetSecretValue"),
	"DescribeSecret":           secretByID("secretsmanager:DescribeSecret"),
	"PutSecretValue":           secretByID("secretsmanager:PutSecretValue"),
	"UpdateSecret":             secretByID("secretsmanager:UpdateSecret"),
	"DeleteSecret":             secretByID("secretsmanager:DeleteSecret"),
	"RestoreSecret":            secretByID("secretsmanager:RestoreSecret"),
	"TagResource":              secretByID("secretsmanager:TagResource"),
	"UntagResource":            secretByID("secretsmanager:UntagResource"),
	"ListSecretVersionIds":     secretByID("secretsmanager:ListSecretVersionIds"),
	"GetResourcePolicy":        secretByID("secretsmanager:GetResourcePolicy"),
	"PutResourcePolicy":        secretByID("secretsmanager:PutResourcePolicy"),
	"DeleteResourcePolicy":     secretByID("secretsmanager:DeleteResourcePolicy"),
	"RotateSecret":             secretByID("secretsmanager:RotateSecret"),
	"CancelRotateSecret":       secretByID("secretsmanager:CancelRotateSecret"),
	"UpdateSecretVersionStage": secretByID("secretsmanager:UpdateSecretVersionStage"),
	"CreateSecret":             secretCreate,
	"ListSecrets":              star("secretsmanager:ListSecrets"),
	"GetRandomPassword":        star("secretsmanager:GetRandomPassword"),
}

type secretInput struct {
	SecretID     string `json:"SecretId"`
	Name         string
	VersionID    string `json:"VersionId"`
	VersionStage string
	Tags         []json.RawMessage
}

// secretARN is the ARN a SecretId is evaluated against: the consumer's
// resolution; else a full ARN as given; else, for a name (or a partial
// ARN) nobody knows, the name's ARN with the six-character wildcard
// suffix Secrets Manager appends, so that only a policy matching any
// suffix ("name-*", "name-??????") allows it.
func (g *Gate) secretARN(id string) string {
	if g.secrets != nil {
		if arn, ok := g.secrets(id); ok {
			return arn
		}
	}
	prefix := g.arn("secretsmanager", "secret:")
	if strings.HasPrefix(id, prefix) {
		name := strings.TrimPrefix(id, prefix)
		if i := strings.LastIndex(name, "-"); i >= 0 && len(name)-i-1 == 6 {
			return id // a full ARN: name and suffix
		}
		id = name // a partial ARN: the name alone
	} else if strings.HasPrefix(id, "arn:") {
		return id
	}
	return prefix + id + "-??????"
}

func secretByID(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		var in secretInput
		if e := g.decode(body, &in); e != nil {
			return mapping{}, e
		}
		if in.SecretID == "" {
			return mapping{}, g.missing("secretId")
		}
		ctx := map[string][]string{"secretsmanager:SecretId": {g.secretARN(in.SecretID)}}
		if in.VersionID != "" {
			ctx["secretsmanager:VersionId"] = []string{in.VersionID}
		}
		if in.VersionStage != "" {
			ctx["secretsmanager:VersionStage"] = []string{in.VersionStage}
		}
		// Secrets Manager names the secret in a denial as the caller gave it.
		return mapping{checks: []check{{action: action, resource: g.secretARN(in.SecretID), shown: in.SecretID, context: ctx}}}, nil
	}
}

// secretCreate: the new secret's ARN is not known before it exists; it is
// the name with any suffix. Tags on create also need TagResource.
func secretCreate(g *Gate, body []byte) (mapping, *awsError) {
	var in secretInput
	if e := g.decode(body, &in); e != nil {
		return mapping{}, e
	}
	if in.Name == "" {
		return mapping{}, g.missing("name")
	}
	r := g.arn("secretsmanager", "secret:"+in.Name+"-??????")
	ctx := map[string][]string{"secretsmanager:Name": {in.Name}}
	m := mapping{checks: []check{{action: "secretsmanager:CreateSecret", resource: r, shown: in.Name, context: ctx}}}
	if len(in.Tags) > 0 {
		m.checks = append(m.checks, check{action: "secretsmanager:TagResource", resource: r, shown: in.Name})
	}
	return m, nil
}

// --- ECS --------------------------------------------------------------

var ecsOps = map[string]mapper{
	"RunTask":                ecsRunTask,
	"StopTask":               ecsTasks("ecs:StopTask"),
	"DescribeTasks":          ecsTasks("ecs:DescribeTasks"),
	"ListTasks":              ecsListTasks,
	"RegisterTaskDefinition": ecsRegister,
	"DescribeTaskDefinition": star("ecs:DescribeTaskDefinition"),
}

// passedToECS is the iam:PassRole context of a role handed to ECS tasks.
var passedToECS = map[string][]string{"iam:PassedToService": {"ecs-tasks.amazonaws.com"}}

// cluster returns a cluster's ARN and name from a name or an ARN ("" is
// the default cluster).
func (g *Gate) cluster(c string) (arn, name string) {
	if c == "" {
		c = "default"
	}
	if strings.HasPrefix(c, "arn:") {
		return c, c[strings.LastIndex(c, "/")+1:]
	}
	return g.arn("ecs", "cluster/"+c), c
}

func clusterContext(arn string) map[string][]string {
	return map[string][]string{"ecs:cluster": {arn}}
}

// taskDefinitionARN builds the ARN of "family:revision" or takes an ARN.
// A bare family (meaning its latest revision) has no revision to name: it
// is evaluated with a wildcard revision, which only a policy allowing
// every revision matches.
func (g *Gate) taskDefinitionARN(ref string) string {
	if strings.HasPrefix(ref, "arn:") {
		return ref
	}
	if !strings.Contains(ref, ":") {
		ref += ":*"
	}
	return g.arn("ecs", "task-definition/"+ref)
}

func ecsRunTask(g *Gate, body []byte) (mapping, *awsError) {
	var in struct {
		Cluster        string `json:"cluster"`
		TaskDefinition string `json:"taskDefinition"`
		Overrides      *struct {
			TaskRoleArn      string `json:"taskRoleArn"`
			ExecutionRoleArn string `json:"executionRoleArn"`
		} `json:"overrides"`
		Tags []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"tags"`
	}
	if e := g.decode(body, &in); e != nil {
		return mapping{}, e
	}
	if in.TaskDefinition == "" {
		return mapping{}, g.missing("taskDefinition")
	}
	clusterARN, clusterName := g.cluster(in.Cluster)
	td := TaskDefinition{ARN: g.taskDefinitionARN(in.TaskDefinition)}
	known := false
	if g.taskDefs != nil {
		if d, ok := g.taskDefs(in.TaskDefinition); ok {
			td, known = d, true
		}
	}
	m := mapping{checks: []check{{action: "ecs:RunTask", resource: td.ARN, context: clusterContext(clusterARN)}}}
	if !known {
		// As ECS answers a task definition it does not have; the roles
		// to pass are unknown, so nothing can run.
		e := awsError{status: 400, typ: "ClientException", key: "message", message: "TaskDefinition not found."}
		m.after = &e
		return m, nil
	}
	taskRole, execRole := td.TaskRoleARN, td.ExecutionRoleARN
	if in.Overrides != nil {
		if in.Overrides.TaskRoleArn != "" {
			taskRole = in.Overrides.TaskRoleArn
		}
		if in.Overrides.ExecutionRoleArn != "" {
			execRole = in.Overrides.ExecutionRoleArn
		}
	}
	for _, role := range []string{taskRole, execRole} {
		if role != "" {
			m.checks = append(m.checks, check{action: "iam:PassRole", resource: role, context: passedToECS})
		}
	}
	if len(in.Tags) > 0 {
		ctx := map[string][]string{"ecs:CreateAction": {"RunTask"}}
		for _, t := range in.Tags {
			ctx["aws:TagKeys"] = append(ctx["aws:TagKeys"], t.Key)
			ctx["aws:RequestTag/"+t.Key] = []string{t.Value}
		}
		// The new task's id is not known yet: any task of the cluster.
		m.checks = append(m.checks, check{action: "ecs:TagResource", resource: g.arn("ecs", "task/"+clusterName+"/*"), context: ctx})
	}
	return m, nil
}

func ecsTasks(action string) mapper {
	return func(g *Gate, body []byte) (mapping, *awsError) {
		var in struct {
			Cluster string   `json:"cluster"`
			Task    string   `json:"task"`
			Tasks   []string `json:"tasks"`
		}
		if e := g.decode(body, &in); e != nil {
			return mapping{}, e
		}
		tasks := in.Tasks
		if in.Task != "" {
			tasks = append(tasks, in.Task)
		}
		if len(tasks) == 0 {
			if action == "ecs:StopTask" {
				return mapping{}, g.missing("task")
			}
			return mapping{}, g.missing("tasks")
		}
		clusterARN, clusterName := g.cluster(in.Cluster)
		var m mapping
		for _, t := range tasks {
			r := t
			if !strings.HasPrefix(t, "arn:") {
				r = g.arn("ecs", "task/"+clusterName+"/"+t)
			}
			m.checks = append(m.checks, check{action: action, resource: r, context: clusterContext(clusterARN)})
		}
		return m, nil
	}
}

func ecsListTasks(g *Gate, body []byte) (mapping, *awsError) {
	var in struct {
		Cluster string `json:"cluster"`
	}
	if e := g.decode(body, &in); e != nil {
		return mapping{}, e
	}
	clusterARN, _ := g.cluster(in.Cluster)
	return mapping{checks: []check{{action: "ecs:ListTasks", resource: "*", context: clusterContext(clusterARN)}}}, nil
}

// ecsRegister: registering a task definition with roles passes them.
func ecsRegister(g *Gate, body []byte) (mapping, *awsError) {
	var in struct {
		TaskRoleArn      string `json:"taskRoleArn"`
		ExecutionRoleArn string `json:"executionRoleArn"`
	}
	if e := g.decode(body, &in); e != nil {
		return mapping{}, e
	}
	m := mapping{checks: []check{{action: "ecs:RegisterTaskDefinition", resource: "*"}}}
	for _, role := range []string{in.TaskRoleArn, in.ExecutionRoleArn} {
		if role != "" {
			m.checks = append(m.checks, check{action: "iam:PassRole", resource: role, context: passedToECS})
		}
	}
	return m, nil
}

// --- STS --------------------------------------------------------------

// stsVersion is the API version every STS request names.
const stsVersion = "2011-06-15"

var stsOps = map[string]mapper{
	"AssumeRole": stsAssumeRole,
	// AWS: "No permissions are required to perform this operation", and
	// an explicit deny of sts:GetCallerIdentity does not stop it.
	"GetCallerIdentity": func(g *Gate, body []byte) (mapping, *awsError) {
		if _, e := g.form(body); e != nil {
			return mapping{}, e
		}
		return mapping{free: true, freeAction: "sts:GetCallerIdentity"}, nil
	},
}

// form decodes a query request's parameters. A parameter given twice is
// refused: the gate and the service might read different copies.
func (g *Gate) form(body []byte) (url.Values, *awsError) {
	f, err := url.ParseQuery(string(body))
	if err != nil {
		e := g.proto.refused("MalformedQueryString", "the request body is not a form")
		return nil, &e
	}
	for k, v := range f {
		if len(v) > 1 {
			e := g.proto.refused("ValidationError", "parameter "+strconv.Quote(k)+" is given more than once")
			return nil, &e
		}
	}
	return f, nil
}

// stsAssumeRole: sts:AssumeRole on the role, with the session name (and
// external id) as AWS puts them in the request context. The role's trust
// policy is the STS stand-in's to evaluate.
func stsAssumeRole(g *Gate, body []byte) (mapping, *awsError) {
	f, e := g.form(body)
	if e != nil {
		return mapping{}, e
	}
	role := f.Get("RoleArn")
	if role == "" {
		return mapping{}, g.missing("roleArn")
	}
	if f.Get("RoleSessionName") == "" {
		return mapping{}, g.missing("roleSessionName")
	}
	ctx := map[string][]string{"sts:RoleSessionName": {f.Get("RoleSessionName")}}
	if x := f.Get("ExternalId"); x != "" {
		ctx["sts:ExternalId"] = []string{x}
	}
	return mapping{checks: []check{{action: "sts:AssumeRole", resource: role, context: ctx}}}, nil
}

var operations = map[Service]map[string]mapper{
	DynamoDB:       dynamoOps,
	SQS:            sqsOps,
	SecretsManager: secretsOps,
	ECS:            ecsOps,
	STS:            stsOps,
}
