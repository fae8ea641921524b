package smstandin

import (
	"strconv"
	"time"
)

// Tag is a secret's tag.
type Tag struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

type createSecretInput struct {
	Name                        *string
	ClientRequestToken          *string
	Description                 *string
	KmsKeyId                    *string
	SecretString                *string
	SecretBinary                []byte // base64 on the wire; nil when absent
	Tags                        []Tag
	AddReplicaRegions           []struct{ Region, KmsKeyId string }
	ForceOverwriteReplicaSecret *bool
}

type createSecretOutput struct {
	ARN       string `json:"ARN"`
	Name      string `json:"Name"`
	VersionId string `json:"VersionId,omitempty"`
}

type getSecretValueInput struct {
	SecretId     *string
	VersionId    *string
	VersionStage *string
}

type getSecretValueOutput struct {
	ARN           string   `json:"ARN"`
	Name          string   `json:"Name"`
	VersionId     string   `json:"VersionId"`
	SecretString  *string  `json:"SecretString,omitempty"`
	SecretBinary  []byte   `json:"SecretBinary,omitempty"`
	VersionStages []string `json:"VersionStages"`
	CreatedDate   epoch    `json:"CreatedDate"`
}

type putSecretValueInput struct {
	SecretId           *string
	ClientRequestToken *string
	SecretString       *string
	SecretBinary       []byte
	VersionStages      []string
	RotationToken      *string
}

type putSecretValueOutput struct {
	ARN           string   `json:"ARN"`
	Name          string   `json:"Name"`
	VersionId     string   `json:"VersionId"`
	VersionStages []string `json:"VersionStages"`
}

type describeSecretInput struct {
	SecretId *string
}

// describeSecretOutput is DescribeSecret's answer and, with
// SecretVersionsToStages, a ListSecrets entry.
type describeSecretOutput struct {
	ARN                    string              `json:"ARN"`
	Name                   string              `json:"Name"`
	Description            string              `json:"Description,omitempty"`
	KmsKeyId               string              `json:"KmsKeyId,omitempty"`
	CreatedDate            epoch               `json:"CreatedDate"`
	LastChangedDate        epoch               `json:"LastChangedDate"`
	LastAccessedDate       *epoch              `json:"LastAccessedDate,omitempty"`
	DeletedDate            *epoch              `json:"DeletedDate,omitempty"`
	Tags                   []Tag               `json:"Tags,omitempty"`
	VersionIdsToStages     map[string][]string `json:"VersionIdsToStages,omitempty"`
	SecretVersionsToStages map[string][]string `json:"SecretVersionsToStages,omitempty"`
}

type filter struct {
	Key    string
	Values []string
}

type listSecretsInput struct {
	IncludePlannedDeletion *bool
	MaxResults             *int
	NextToken              *string
	Filters                []filter
	SortOrder              *string
}

type listSecretsOutput struct {
	SecretList []describeSecretOutput `json:"SecretList"`
	NextToken  string                 `json:"NextToken,omitempty"`
}

type updateSecretVersionStageInput struct {
	SecretId            *string
	VersionStage        *string
	RemoveFromVersionId *string
	MoveToVersionId     *string
}

type arnName struct {
	ARN  string `json:"ARN"`
	Name string `json:"Name"`
}

type deleteSecretInput struct {
	SecretId                   *string
	RecoveryWindowInDays       *int64
	ForceDeleteWithoutRecovery *bool
}

type deleteSecretOutput struct {
	ARN          string `json:"ARN"`
	Name         string `json:"Name"`
	DeletionDate epoch  `json:"DeletionDate"`
}

type getRandomPasswordInput struct {
	PasswordLength          *int64
	ExcludeCharacters       *string
	ExcludeNumbers          *bool
	ExcludePunctuation      *bool
	ExcludeUppercase        *bool
	ExcludeLowercase        *bool
	IncludeSpace            *bool
	RequireEachIncludedType *bool
}

type getRandomPasswordOutput struct {
	RandomPassword string `json:"RandomPassword"`
}

// epoch is a timestamp as awsJson writes it: epoch seconds.
type epoch time.Time

func (e epoch) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(float64(time.Time(e).UnixMilli())/1000, 'f', 3, 64)), nil
}

func stamp(t time.Time) *epoch {
	if t.IsZero() {
		return nil
	}
	e := epoch(t)
	return &e
}
