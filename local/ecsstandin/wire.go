package ecsstandin

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/galley-run/galley/local/awswire"
)

// The awsJson1_1 protocol of ECS: every call is a POST to "/" naming its
// operation in X-Amz-Target.
const (
	TargetPrefix = "AmazonEC2ContainerServiceV20141113."
	ContentType  = awswire.ContentTypeJSON11
)

// Operations the stand-in serves.
const (
	OpRunTask       = "RunTask"
	OpStopTask      = "StopTask"
	OpDescribeTasks = "DescribeTasks"
	OpListTasks     = "ListTasks"

	OpRegisterTaskDefinition = "RegisterTaskDefinition"
	OpDescribeTaskDefinition = "DescribeTaskDefinition"
	OpCreateCluster          = "CreateCluster"
	OpDescribeClusters       = "DescribeClusters"
)

type tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type containerOverride struct {
	Name        string     `json:"name"`
	Command     []string   `json:"command,omitempty"`
	Environment []KeyValue `json:"environment,omitempty"`
}

type taskOverride struct {
	ContainerOverrides []containerOverride `json:"containerOverrides"`
	TaskRoleArn        string              `json:"taskRoleArn,omitempty"`
	ExecutionRoleArn   string              `json:"executionRoleArn,omitempty"`
}

type capacityProviderItem struct {
	CapacityProvider string `json:"capacityProvider"`
	Weight           int    `json:"weight"`
	Base             int    `json:"base"`
}

type runTaskInput struct {
	Cluster                  string                 `json:"cluster"`
	TaskDefinition           string                 `json:"taskDefinition"`
	Count                    *int                   `json:"count"`
	ClientToken              string                 `json:"clientToken"`
	StartedBy                string                 `json:"startedBy"`
	Group                    string                 `json:"group"`
	LaunchType               string                 `json:"launchType"`
	CapacityProviderStrategy []capacityProviderItem `json:"capacityProviderStrategy"`
	PlatformVersion          string                 `json:"platformVersion"`
	NetworkConfiguration     *struct {
		AwsvpcConfiguration *struct {
			Subnets        []string `json:"subnets"`
			SecurityGroups []string `json:"securityGroups"`
			AssignPublicIP string   `json:"assignPublicIp"`
		} `json:"awsvpcConfiguration"`
	} `json:"networkConfiguration"`
	Overrides            *taskOverride `json:"overrides"`
	Tags                 []tag         `json:"tags"`
	EnableECSManagedTags bool          `json:"enableECSManagedTags"`
	PropagateTags        string        `json:"propagateTags"`
}

type stopTaskInput struct {
	Cluster string `json:"cluster"`
	Task    string `json:"task"`
	Reason  string `json:"reason"`
}

type describeTasksInput struct {
	Cluster string   `json:"cluster"`
	Tasks   []string `json:"tasks"`
	Include []string `json:"include"`
}

type listTasksInput struct {
	Cluster       string `json:"cluster"`
	StartedBy     string `json:"startedBy"`
	DesiredStatus string `json:"desiredStatus"`
	Family        string `json:"family"`
	LaunchType    string `json:"launchType"`
	ServiceName   string `json:"serviceName"`
	Container     string `json:"containerInstance"`
	MaxResults    *int   `json:"maxResults"`
	NextToken     string `json:"nextToken"`
}

type failure struct {
	Arn    string `json:"arn,omitempty"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// stamp is a timestamp as ECS writes it: epoch seconds in API answers,
// ISO-8601 strings in EventBridge events.
type stamp struct {
	t   time.Time
	iso bool
}

func (s stamp) MarshalJSON() ([]byte, error) {
	if s.iso {
		return json.Marshal(s.t.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	return []byte(strconv.FormatFloat(float64(s.t.UnixMilli())/1000, 'f', 3, 64)), nil
}

type wireContainer struct {
	ContainerArn string `json:"containerArn"`
	TaskArn      string `json:"taskArn"`
	Name         string `json:"name"`
	Image        string `json:"image"`
	LastStatus   string `json:"lastStatus"`
	ExitCode     *int   `json:"exitCode,omitempty"`
	Reason       string `json:"reason,omitempty"`
	RuntimeID    string `json:"runtimeId,omitempty"`
	CPU          string `json:"cpu"`
}

// wireTask is a Task as DescribeTasks answers it and as an event's detail
// carries it.
type wireTask struct {
	TaskArn              string          `json:"taskArn"`
	ClusterArn           string          `json:"clusterArn"`
	TaskDefinitionArn    string          `json:"taskDefinitionArn"`
	AvailabilityZone     string          `json:"availabilityZone"`
	LaunchType           string          `json:"launchType,omitempty"`
	CapacityProviderName string          `json:"capacityProviderName,omitempty"`
	PlatformVersion      string          `json:"platformVersion"`
	PlatformFamily       string          `json:"platformFamily"`
	CPU                  string          `json:"cpu"`
	Memory               string          `json:"memory"`
	Group                string          `json:"group"`
	StartedBy            string          `json:"startedBy,omitempty"`
	LastStatus           string          `json:"lastStatus"`
	DesiredStatus        string          `json:"desiredStatus"`
	Connectivity         string          `json:"connectivity,omitempty"`
	StopCode             string          `json:"stopCode,omitempty"`
	StoppedReason        string          `json:"stoppedReason,omitempty"`
	Version              int64           `json:"version"`
	Containers           []wireContainer `json:"containers"`
	Overrides            taskOverride    `json:"overrides"`
	Tags                 []tag           `json:"tags,omitempty"`
	EnableExecuteCommand bool            `json:"enableExecuteCommand"`
	CreatedAt            *stamp          `json:"createdAt,omitempty"`
	ConnectivityAt       *stamp          `json:"connectivityAt,omitempty"`
	PullStartedAt        *stamp          `json:"pullStartedAt,omitempty"`
	PullStoppedAt        *stamp          `json:"pullStoppedAt,omitempty"`
	StartedAt            *stamp          `json:"startedAt,omitempty"`
	StoppingAt           *stamp          `json:"stoppingAt,omitempty"`
	ExecutionStoppedAt   *stamp          `json:"executionStoppedAt,omitempty"`
	StoppedAt            *stamp          `json:"stoppedAt,omitempty"`
	UpdatedAt            *stamp          `json:"updatedAt,omitempty"` // events only
}

// eventEnvelope is EventBridge's envelope of an ECS event.
type eventEnvelope struct {
	Version    string   `json:"version"`
	ID         string   `json:"id"`
	DetailType string   `json:"detail-type"`
	Source     string   `json:"source"`
	Account    string   `json:"account"`
	Time       string   `json:"time"`
	Region     string   `json:"region"`
	Resources  []string `json:"resources"`
	Detail     wireTask `json:"detail"`
}
