package ecsstandin

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// The task endpoint plays what Fargate serves each task at 169.254.170.2
// (not ours to bind): the task role's credentials at /v2/credentials/<id>
// and the task metadata at /v3/<id> and /v4/<id>. It listens on loopback,
// since the SDK accepts AWS_CONTAINER_CREDENTIALS_FULL_URI only for a
// loopback host (or HTTPS). Like Fargate's, it answers whoever knows a URL.

// TaskCredentials returns credentials of the role taskRoleArn: what STS
// would give the ECS agent that assumes a task's role.
type TaskCredentials func(taskRoleArn string) (aws.Credentials, error)

// WithTaskCredentials serves a task definition's task role to its tasks
// through the credentials endpoint. Without it a task with a task role
// fails to start.
func WithTaskCredentials(f TaskCredentials) Option { return func(s *Server) { s.taskCreds = f } }

// WithTaskEndpoint sets the loopback address of the task endpoint; the
// default is a free port on 127.0.0.1.
func WithTaskEndpoint(addr string) Option { return func(s *Server) { s.endpointAddr = addr } }

// WithTaskEndpointListener serves the task endpoint on ln (a container
// network's host side, where containers reach it) instead.
func WithTaskEndpointListener(ln net.Listener) Option { return func(s *Server) { s.endpointLn = ln } }

// credentialsLifetime is what the endpoint claims of credentials that do
// not expire; Fargate's always do, and the SDK refreshes before it.
const credentialsLifetime = 6 * time.Hour

func (s *Server) startTaskEndpoint() error {
	addr := s.endpointAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln := s.endpointLn
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return err
		}
	}
	s.endpointURL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/credentials/{id}", s.serveCredentials)
	mux.HandleFunc("GET /v3/{id}", s.serveMetadata)
	mux.HandleFunc("GET /v3/{id}/task", s.serveMetadata)
	mux.HandleFunc("GET /v4/{id}", s.serveMetadata)
	mux.HandleFunc("GET /v4/{id}/task", s.serveMetadata)
	s.endpoint = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.endpoint.Serve(ln) }()
	return nil
}

// TaskEndpoint returns the task endpoint's base URL.
func (s *Server) TaskEndpoint() string { return s.endpointURL }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveCredentials answers the task role's credentials as the ECS agent
// does, its errors included (400 InvalidIdInRequest for an ID it does not
// know, as for a task that stopped).
func (s *Server) serveCredentials(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	var role string
	for _, t := range s.order {
		if t.credID == id && t.taskRole != "" && t.lastStatus != statusStopped {
			role = t.taskRole
			break
		}
	}
	s.mu.Unlock()
	if role == "" || s.taskCreds == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{
			"code": "InvalidIdInRequest", "message": "CredentialsV2Request: Credentials not found"})
		return
	}
	c, err := s.taskCreds(role)
	if err != nil {
		s.log.Error("cannot get a task role's credentials", "role", role, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{
			"code": "InternalServerError", "message": "Internal server error"})
		return
	}
	exp := c.Expires
	if !c.CanExpire {
		exp = time.Now().Add(credentialsLifetime)
	}
	writeJSON(w, http.StatusOK, map[string]string{
		"RoleArn": role, "AccessKeyId": c.AccessKeyID, "SecretAccessKey": c.SecretAccessKey,
		"Token": c.SessionToken, "Expiration": exp.UTC().Format(time.RFC3339),
	})
}

// serveMetadata answers a minimal task metadata (v3/v4): the container, or
// with /task the task and its container.
func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	var t *task
	for _, x := range s.order {
		if x.metaID == id {
			t = x
			break
		}
	}
	if t == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "metadata not found"})
		return
	}
	container := map[string]any{
		"DockerId": t.runtimeID, "Name": t.container, "DockerName": "ecs-" + t.family + "-" + t.container,
		"Image": t.image, "DesiredStatus": t.desiredStatus, "KnownStatus": t.containerStatus,
		"Type": "NORMAL", "ContainerARN": t.containerArn,
		"Labels": map[string]string{
			"com.amazonaws.ecs.cluster": t.clusterArn, "com.amazonaws.ecs.container-name": t.container,
			"com.amazonaws.ecs.task-arn": t.arn, "com.amazonaws.ecs.task-definition-family": t.family,
			"com.amazonaws.ecs.task-definition-version": t.revision,
		},
	}
	if !strings.HasSuffix(r.URL.Path, "/task") {
		writeJSON(w, http.StatusOK, container)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"Cluster": t.clusterArn, "TaskARN": t.arn, "Family": t.family, "Revision": t.revision,
		"DesiredStatus": t.desiredStatus, "KnownStatus": t.lastStatus, "LaunchType": "FARGATE",
		"AvailabilityZone": s.region + "a", "Containers": []any{container},
	})
}
