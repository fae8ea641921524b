package smstandin

import (
	"slices"
	"strings"

	"github.com/galley-run/galley/local/awswire"
)

// The Go API, for the local stack that defines the template's secrets in
// process. Every call goes through the same validation as the wire
// protocol, and its errors are the same *Error.

// CreateOption sets a member of a secret being created.
type CreateOption func(*createSecretInput)

// WithDescription sets the secret's description.
func WithDescription(d string) CreateOption {
	return func(in *createSecretInput) { in.Description = &d }
}

// WithTags sets the secret's tags.
func WithTags(tags ...Tag) CreateOption {
	return func(in *createSecretInput) { in.Tags = slices.Clone(tags) }
}

// WithKmsKeyID records the KMS key that would encrypt the secret.
func WithKmsKeyID(id string) CreateOption {
	return func(in *createSecretInput) { in.KmsKeyId = &id }
}

// Create creates secret name whose AWSCURRENT version is the string value,
// and returns its ARN.
func (s *Server) Create(name, value string, opts ...CreateOption) (string, error) {
	return s.create(name, &value, nil, opts)
}

// CreateBinary creates secret name whose AWSCURRENT version is the binary
// value, and returns its ARN.
func (s *Server) CreateBinary(name string, value []byte, opts ...CreateOption) (string, error) {
	if value == nil {
		value = []byte{}
	}
	return s.create(name, nil, value, opts)
}

// CreateEmpty creates secret name with no version (GetSecretValue answers
// ResourceNotFoundException until a value is put), and returns its ARN.
func (s *Server) CreateEmpty(name string, opts ...CreateOption) (string, error) {
	return s.create(name, nil, nil, opts)
}

// CreateGenerated creates secret name with a value generated as
// CloudFormation does for a template's GenerateSecretString, and returns
// its ARN.
func (s *Server) CreateGenerated(name string, g GenerateSecretString, opts ...CreateOption) (string, error) {
	v, err := g.Generate()
	if err != nil {
		return "", err
	}
	return s.create(name, &v, nil, opts)
}

func (s *Server) create(name string, str *string, bin []byte, opts []CreateOption) (string, error) {
	in := &createSecretInput{Name: &name, SecretString: str, SecretBinary: bin}
	if str != nil || bin != nil {
		t := awswire.UUID()
		in.ClientRequestToken = &t
	}
	for _, o := range opts {
		o(in)
	}
	out, err := s.createSecret(in)
	if err != nil {
		return "", err
	}
	return out.ARN, nil
}

// Put puts the string value as a new version of the secret secretID (a
// name or an ARN), which becomes AWSCURRENT; the version that was
// AWSCURRENT becomes AWSPREVIOUS. It returns the new version's id.
func (s *Server) Put(secretID, value string) (string, error) {
	return s.put(secretID, &value, nil)
}

// PutBinary is Put for a binary value.
func (s *Server) PutBinary(secretID string, value []byte) (string, error) {
	if value == nil {
		value = []byte{}
	}
	return s.put(secretID, nil, value)
}

func (s *Server) put(secretID string, str *string, bin []byte) (string, error) {
	t := awswire.UUID()
	out, err := s.putSecretValue(&putSecretValueInput{SecretId: &secretID, ClientRequestToken: &t, SecretString: str, SecretBinary: bin})
	if err != nil {
		return "", err
	}
	return out.VersionId, nil
}

// ARN returns the ARN of the secret named name, if it exists (scheduled
// for deletion or not).
func (s *Server) ARN(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked()
	if sec := s.secrets[name]; sec != nil {
		return sec.arn, true
	}
	return "", false
}

// Resolve returns the ARN of the secret secretID names, as Secrets Manager
// resolves a SecretId: a name, a full ARN or a partial ARN (without the six
// random characters). The IAM gate uses it to evaluate a request against
// the secret's ARN.
func (s *Server) Resolve(secretID string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.findLocked(secretID)
	if err != nil {
		return "", false
	}
	return sec.arn, true
}

// ARNPrefix is the start of every secret ARN this stand-in makes.
func (s *Server) ARNPrefix() string {
	return "arn:aws:secretsmanager:" + s.region + ":" + s.account + ":secret:"
}

// Names returns the names of the secrets, sorted.
func (s *Server) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked()
	var out []string
	for name := range s.secrets {
		out = append(out, name)
	}
	slices.SortFunc(out, strings.Compare)
	return out
}
