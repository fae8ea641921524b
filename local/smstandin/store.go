package smstandin

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Staging labels Secrets Manager moves itself.
const (
	StageCurrent  = "AWSCURRENT"
	StagePrevious = "AWSPREVIOUS"
)

const (
	maxNameLen       = 512
	maxSecretIDLen   = 2048
	maxDescription   = 2048
	maxStagesPerCall = 20
	maxStageLen      = 256
	maxTags          = 50
	// maxDeprecated is how many versions without a label a secret keeps;
	// AWS removes the oldest beyond it.
	maxDeprecated   = 100
	defaultRecovery = 30
)

// secret is one secret and its versions.
type secret struct {
	name, arn   string
	description string
	kmsKeyID    string
	tags        []Tag
	created     time.Time
	changed     time.Time
	accessed    time.Time  // zero: never read
	deleteAt    time.Time  // zero: not scheduled for deletion
	versions    []*version // in creation order
}

type version struct {
	id      string
	str     *string
	bin     []byte
	stages  []string
	created time.Time
}

func (v *version) same(str *string, bin []byte) bool {
	if (v.str == nil) != (str == nil) || (v.bin == nil) != (bin == nil) {
		return false
	}
	if str != nil {
		return *v.str == *str
	}
	return bytes.Equal(v.bin, bin)
}

func (v *version) has(stage string) bool { return slices.Contains(v.stages, stage) }

func (v *version) drop(stage string) {
	v.stages = slices.DeleteFunc(v.stages, func(s string) bool { return s == stage })
}

func (sec *secret) version(id string) *version {
	for _, v := range sec.versions {
		if v.id == id {
			return v
		}
	}
	return nil
}

func (sec *secret) holder(stage string) *version {
	for _, v := range sec.versions {
		if v.has(stage) {
			return v
		}
	}
	return nil
}

// attach moves stage onto v. Moving AWSCURRENT moves AWSPREVIOUS onto the
// version AWSCURRENT left, as Secrets Manager does.
func (sec *secret) attach(v *version, stage string) {
	h := sec.holder(stage)
	if h == v {
		return
	}
	if h != nil {
		h.drop(stage)
	}
	v.stages = append(v.stages, stage)
	if stage == StageCurrent && h != nil {
		sec.attach(h, StagePrevious)
	}
}

// prune removes the oldest versions without a label beyond maxDeprecated.
func (sec *secret) prune() {
	n := 0
	for _, v := range sec.versions {
		if len(v.stages) == 0 {
			n++
		}
	}
	sec.versions = slices.DeleteFunc(sec.versions, func(v *version) bool {
		if len(v.stages) == 0 && n > maxDeprecated {
			n--
			return true
		}
		return false
	})
}

func (sec *secret) stagesMap() map[string][]string {
	m := map[string][]string{}
	for _, v := range sec.versions {
		if len(v.stages) > 0 {
			m[v.id] = slices.Clone(v.stages)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func (sec *secret) deleted() bool { return !sec.deleteAt.IsZero() }

// The errors Secrets Manager answers with, in its words.
var (
	errNotFound = func() *Error {
		return errf(400, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
	}
	errMarkedDeleted = func() *Error {
		return errf(400, "InvalidRequestException", "You can't perform this operation on the secret because it was marked for deletion.")
	}
	errNoToken = func() *Error {
		return errf(400, "InvalidRequestException", "You must provide a ClientRequestToken value. We recommend a UUID-type value.")
	}
	errBothValues = func() *Error {
		return errf(400, "InvalidParameterException", "You can't specify both a binary secret value and a string secret value in the same secret.")
	}
	errInvalidName = func() *Error {
		return errf(400, "ValidationException", "Invalid name. Must be a valid name containing alphanumeric characters, or any of the following: -/_+=.@!")
	}
)

// constraint is the ValidationException of a request member that breaks a
// constraint of the API model. value is quoted only when not nil: a
// secret's members are never quoted.
func constraint(member string, value *string, rule string) *Error {
	at := "Value at '" + member + "'"
	if value != nil {
		at = "Value '" + *value + "' at '" + member + "'"
	}
	return errf(400, "ValidationException", "1 validation error detected: %s failed to satisfy constraint: Member must %s", at, rule)
}

func required(member string) *Error {
	return errf(400, "ValidationException", "1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", member)
}

func checkLen(member string, v *string, lo, hi int, quote bool) *Error {
	if v == nil {
		return nil
	}
	var q *string
	if quote {
		q = v
	}
	switch n := len(*v); {
	case n < lo:
		return constraint(member, q, fmt.Sprintf("have length greater than or equal to %d", lo))
	case n > hi:
		return constraint(member, q, fmt.Sprintf("have length less than or equal to %d", hi))
	}
	return nil
}

func validName(name string) bool {
	if name == "" || len(name) > maxNameLen {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/_+=.@-", c)) {
			return false
		}
	}
	return true
}

func checkName(name *string) *Error {
	if name == nil {
		return required("name")
	}
	if err := checkLen("name", name, 1, maxNameLen, true); err != nil {
		return err
	}
	if !validName(*name) {
		return errInvalidName()
	}
	return nil
}

func checkSecretID(id *string) *Error {
	if id == nil {
		return required("secretId")
	}
	if err := checkLen("secretId", id, 1, maxSecretIDLen, false); err != nil {
		return err
	}
	if !strings.HasPrefix(*id, "arn:") && !validName(*id) {
		return errInvalidName()
	}
	return nil
}

func checkToken(token *string) *Error {
	return checkLen("clientRequestToken", token, 32, 64, true)
}

// checkValue checks a version's value: one of the two, within AWS's size.
func checkValue(str *string, bin []byte) *Error {
	switch {
	case str != nil && bin != nil:
		return errBothValues()
	case str != nil && len(*str) > MaxSecretSize:
		return constraint("secretString", nil, fmt.Sprintf("have length less than or equal to %d", MaxSecretSize))
	case bin != nil && len(bin) > MaxSecretSize:
		return constraint("secretBinary", nil, fmt.Sprintf("have length less than or equal to %d", MaxSecretSize))
	case bin != nil && len(bin) == 0:
		return constraint("secretBinary", nil, "have length greater than or equal to 1")
	}
	return nil
}

func checkStage(member string, stage *string) *Error {
	return checkLen(member, stage, 1, maxStageLen, true)
}

// purgeLocked removes the secrets whose recovery window has passed.
func (s *Server) purgeLocked() {
	now := s.now()
	for name, sec := range s.secrets {
		if sec.deleted() && !now.Before(sec.deleteAt) {
			delete(s.secrets, name)
		}
	}
}

// findLocked finds a secret by name, full ARN or partial ARN (the ARN
// without the six random characters).
func (s *Server) findLocked(id string) (*secret, *Error) {
	s.purgeLocked()
	if rest, ok := strings.CutPrefix(id, "arn:"); ok {
		for _, sec := range s.secrets {
			if sec.arn == id {
				return sec, nil
			}
		}
		if name, ok := strings.CutPrefix(rest, "aws:secretsmanager:"+s.region+":"+s.account+":secret:"); ok {
			if sec := s.secrets[name]; sec != nil {
				return sec, nil
			}
		}
		return nil, errNotFound()
	}
	if sec := s.secrets[id]; sec != nil {
		return sec, nil
	}
	return nil, errNotFound()
}

const alphanumerics = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func (s *Server) newARN(name string) string {
	return "arn:aws:secretsmanager:" + s.region + ":" + s.account + ":secret:" + name + "-" + randomFrom(alphanumerics, 6)
}

func randomFrom(alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[randInt(len(alphabet))]
	}
	return string(b)
}

func randInt(n int) int {
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return int(v.Int64())
}

func (s *Server) createSecret(in *createSecretInput) (*createSecretOutput, *Error) {
	if err := checkName(in.Name); err != nil {
		return nil, err
	}
	if err := checkLen("description", in.Description, 0, maxDescription, false); err != nil {
		return nil, err
	}
	if err := checkLen("kmsKeyId", in.KmsKeyId, 0, 2048, true); err != nil {
		return nil, err
	}
	if err := checkToken(in.ClientRequestToken); err != nil {
		return nil, err
	}
	if err := checkTags(in.Tags); err != nil {
		return nil, err
	}
	if err := checkValue(in.SecretString, in.SecretBinary); err != nil {
		return nil, err
	}
	hasValue := in.SecretString != nil || in.SecretBinary != nil
	if hasValue && in.ClientRequestToken == nil {
		return nil, errNoToken()
	}
	if len(in.AddReplicaRegions) > 0 {
		return nil, errf(400, "InvalidRequestException", "the stand-in does not replicate secrets")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked()
	name := *in.Name
	if sec := s.secrets[name]; sec != nil {
		if sec.deleted() {
			return nil, errf(400, "InvalidRequestException", "You can't create this secret because a secret with this name is already scheduled for deletion.")
		}
		// A retry with the same token and value is ignored: it answers
		// what the first call made.
		if in.ClientRequestToken != nil && hasValue {
			if v := sec.version(*in.ClientRequestToken); v != nil && v.same(in.SecretString, in.SecretBinary) {
				return &createSecretOutput{ARN: sec.arn, Name: sec.name, VersionId: v.id}, nil
			}
		}
		return nil, errf(400, "ResourceExistsException", "The operation failed because the secret %s already exists.", name)
	}
	now := s.now()
	sec := &secret{name: name, arn: s.newARN(name), tags: slices.Clone(in.Tags), created: now, changed: now}
	if in.Description != nil {
		sec.description = *in.Description
	}
	if in.KmsKeyId != nil {
		sec.kmsKeyID = *in.KmsKeyId
	}
	out := &createSecretOutput{ARN: sec.arn, Name: name}
	if hasValue {
		v := &version{id: *in.ClientRequestToken, str: cloneStr(in.SecretString), bin: bytes.Clone(in.SecretBinary), created: now}
		sec.versions = append(sec.versions, v)
		sec.attach(v, StageCurrent)
		out.VersionId = v.id
	}
	s.secrets[name] = sec
	return out, nil
}

func checkTags(tags []Tag) *Error {
	if len(tags) > maxTags {
		return constraint("tags", nil, fmt.Sprintf("have length less than or equal to %d", maxTags))
	}
	seen := map[string]bool{}
	for i := range tags {
		if err := checkLen("tags.member.key", &tags[i].Key, 1, 128, true); err != nil {
			return err
		}
		if err := checkLen("tags.member.value", &tags[i].Value, 0, 256, false); err != nil {
			return err
		}
		if seen[tags[i].Key] {
			return errf(400, "InvalidParameterException", "You can't specify the same tag key more than once.")
		}
		seen[tags[i].Key] = true
	}
	return nil
}

func cloneStr(p *string) *string {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func (s *Server) getSecretValue(in *getSecretValueInput) (*getSecretValueOutput, *Error) {
	if err := checkSecretID(in.SecretId); err != nil {
		return nil, err
	}
	if err := checkLen("versionId", in.VersionId, 32, 64, true); err != nil {
		return nil, err
	}
	if err := checkStage("versionStage", in.VersionStage); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.findLocked(*in.SecretId)
	if err != nil {
		return nil, err
	}
	if sec.deleted() {
		return nil, errMarkedDeleted()
	}
	var v *version
	switch {
	case in.VersionId != nil:
		if v = sec.version(*in.VersionId); v == nil {
			return nil, errf(400, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for VersionId: %s", *in.VersionId)
		}
		if in.VersionStage != nil && !v.has(*in.VersionStage) {
			return nil, errf(400, "InvalidRequestException", "You provided a VersionStage that is not associated to the provided VersionId.")
		}
	default:
		stage := StageCurrent
		if in.VersionStage != nil {
			stage = *in.VersionStage
		}
		if v = sec.holder(stage); v == nil {
			return nil, errf(400, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: %s", stage)
		}
	}
	// Like AWS, the last access is kept to the day.
	sec.accessed = s.now().UTC().Truncate(24 * time.Hour)
	return &getSecretValueOutput{
		ARN: sec.arn, Name: sec.name, VersionId: v.id,
		SecretString: cloneStr(v.str), SecretBinary: bytes.Clone(v.bin),
		VersionStages: slices.Clone(v.stages), CreatedDate: epoch(v.created),
	}, nil
}

func (s *Server) putSecretValue(in *putSecretValueInput) (*putSecretValueOutput, *Error) {
	if err := checkSecretID(in.SecretId); err != nil {
		return nil, err
	}
	if err := checkToken(in.ClientRequestToken); err != nil {
		return nil, err
	}
	if in.SecretString == nil && in.SecretBinary == nil {
		return nil, errf(400, "InvalidParameterException", "You must provide either SecretString or SecretBinary.")
	}
	if err := checkValue(in.SecretString, in.SecretBinary); err != nil {
		return nil, err
	}
	if in.ClientRequestToken == nil {
		return nil, errNoToken()
	}
	if in.RotationToken != nil {
		return nil, errf(400, "InvalidRequestException", "the stand-in does not rotate secrets: RotationToken is not accepted")
	}
	stages := []string{StageCurrent}
	if in.VersionStages != nil {
		if len(in.VersionStages) < 1 || len(in.VersionStages) > maxStagesPerCall {
			return nil, constraint("versionStages", nil, fmt.Sprintf("have length between 1 and %d", maxStagesPerCall))
		}
		for i := range in.VersionStages {
			if err := checkStage("versionStages.member", &in.VersionStages[i]); err != nil {
				return nil, err
			}
		}
		stages = in.VersionStages
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.findLocked(*in.SecretId)
	if err != nil {
		return nil, err
	}
	if sec.deleted() {
		return nil, errMarkedDeleted()
	}
	if v := sec.version(*in.ClientRequestToken); v != nil {
		// The same token and value is a retry, which changes nothing;
		// another value under a version's id is refused.
		if !v.same(in.SecretString, in.SecretBinary) {
			return nil, errf(400, "ResourceExistsException", "You can't modify an existing version, you can only create a new version.")
		}
		return &putSecretValueOutput{ARN: sec.arn, Name: sec.name, VersionId: v.id, VersionStages: slices.Clone(v.stages)}, nil
	}
	now := s.now()
	v := &version{id: *in.ClientRequestToken, str: cloneStr(in.SecretString), bin: bytes.Clone(in.SecretBinary), created: now}
	sec.versions = append(sec.versions, v)
	for _, st := range stages {
		sec.attach(v, st)
	}
	sec.prune()
	sec.changed = now
	return &putSecretValueOutput{ARN: sec.arn, Name: sec.name, VersionId: v.id, VersionStages: slices.Clone(v.stages)}, nil
}

func (sec *secret) describe() describeSecretOutput {
	return describeSecretOutput{
		ARN: sec.arn, Name: sec.name, Description: sec.description, KmsKeyId: sec.kmsKeyID,
		CreatedDate: epoch(sec.created), LastChangedDate: epoch(sec.changed),
		LastAccessedDate: stamp(sec.accessed), DeletedDate: stamp(sec.deleteAt),
		Tags: slices.Clone(sec.tags),
	}
}

func (s *Server) describeSecret(in *describeSecretInput) (*describeSecretOutput, *Error) {
	if err := checkSecretID(in.SecretId); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.findLocked(*in.SecretId)
	if err != nil {
		return nil, err
	}
	out := sec.describe()
	out.VersionIdsToStages = sec.stagesMap()
	return &out, nil
}

var filterKeys = []string{"description", "name", "tag-key", "tag-value", "primary-region", "owning-service", "all"}

func (s *Server) listSecrets(in *listSecretsInput) (*listSecretsOutput, *Error) {
	max := 100
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			v := strconv.Itoa(*in.MaxResults)
			return nil, constraint("maxResults", &v, "have value between 1 and 100")
		}
		max = *in.MaxResults
	}
	if len(in.Filters) > 10 {
		return nil, constraint("filters", nil, "have length less than or equal to 10")
	}
	for _, f := range in.Filters {
		if !slices.Contains(filterKeys, f.Key) {
			k := f.Key
			return nil, constraint("filters.member.key", &k, "satisfy enum value set: ["+strings.Join(filterKeys, ", ")+"]")
		}
		if len(f.Values) > 10 {
			return nil, constraint("filters.member.values", nil, "have length less than or equal to 10")
		}
		for i := range f.Values {
			if err := checkLen("filters.member.values.member", &f.Values[i], 1, 512, true); err != nil {
				return nil, err
			}
		}
	}
	desc := false
	if in.SortOrder != nil {
		switch *in.SortOrder {
		case "asc":
		case "desc":
			desc = true
		default:
			return nil, constraint("sortOrder", in.SortOrder, "satisfy enum value set: [asc, desc]")
		}
	}
	start := 0
	if in.NextToken != nil {
		b, err := base64.RawURLEncoding.DecodeString(*in.NextToken)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 {
			return nil, errf(400, "InvalidNextTokenException", "The NextToken value is invalid.")
		}
		start = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked()
	var all []*secret
	for _, sec := range s.secrets {
		if sec.deleted() && (in.IncludePlannedDeletion == nil || !*in.IncludePlannedDeletion) {
			continue
		}
		if matchesAll(sec, in.Filters) {
			all = append(all, sec)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].created.Equal(all[j].created) {
			return all[i].created.Before(all[j].created) != desc
		}
		return all[i].name < all[j].name != desc
	})
	out := &listSecretsOutput{SecretList: []describeSecretOutput{}}
	if start > len(all) {
		return nil, errf(400, "InvalidNextTokenException", "The NextToken value is invalid.")
	}
	end := min(start+max, len(all))
	for _, sec := range all[start:end] {
		e := sec.describe()
		e.SecretVersionsToStages = sec.stagesMap()
		out.SecretList = append(out.SecretList, e)
	}
	if end < len(all) {
		out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	return out, nil
}

// matchesAll applies ListSecrets filters: each value is a prefix of a field,
// or with a leading "!" a prefix it must not have; every filter must hold.
func matchesAll(sec *secret, filters []filter) bool {
	for _, f := range filters {
		var fields []string
		switch f.Key {
		case "name":
			fields = []string{sec.name}
		case "description":
			fields = []string{sec.description}
		case "tag-key", "tag-value", "all":
			if f.Key == "all" {
				fields = append(fields, sec.name, sec.description)
			}
			for _, t := range sec.tags {
				if f.Key != "tag-value" {
					fields = append(fields, t.Key)
				}
				if f.Key != "tag-key" {
					fields = append(fields, t.Value)
				}
			}
		}
		hit := func(p string) bool {
			for _, x := range fields {
				if x != "" && strings.HasPrefix(x, p) {
					return true
				}
			}
			return false
		}
		positive, ok := 0, false
		for _, v := range f.Values {
			if neg, isNeg := strings.CutPrefix(v, "!"); isNeg {
				if hit(neg) {
					return false
				}
				continue
			}
			positive++
			ok = ok || hit(v)
		}
		if positive > 0 && !ok {
			return false
		}
	}
	return true
}

func (s *Server) updateSecretVersionStage(in *updateSecretVersionStageInput) (*arnName, *Error) {
	if err := checkSecretID(in.SecretId); err != nil {
		return nil, err
	}
	if in.VersionStage == nil {
		return nil, required("versionStage")
	}
	if err := checkStage("versionStage", in.VersionStage); err != nil {
		return nil, err
	}
	if err := checkLen("removeFromVersionId", in.RemoveFromVersionId, 32, 64, true); err != nil {
		return nil, err
	}
	if err := checkLen("moveToVersionId", in.MoveToVersionId, 32, 64, true); err != nil {
		return nil, err
	}
	stage := *in.VersionStage
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.findLocked(*in.SecretId)
	if err != nil {
		return nil, err
	}
	if sec.deleted() {
		return nil, errMarkedDeleted()
	}
	var from, to *version
	if in.RemoveFromVersionId != nil {
		if from = sec.version(*in.RemoveFromVersionId); from == nil {
			return nil, errf(400, "InvalidParameterException", "Not a valid version: %s", *in.RemoveFromVersionId)
		}
		if !from.has(stage) {
			return nil, errf(400, "InvalidParameterException", "The staging label %s is not attached to version %s.", stage, from.id)
		}
	}
	if in.MoveToVersionId != nil {
		if to = sec.version(*in.MoveToVersionId); to == nil {
			return nil, errf(400, "InvalidParameterException", "Not a valid version: %s", *in.MoveToVersionId)
		}
	}
	if from == nil && to == nil {
		return nil, errf(400, "InvalidParameterException", "You must specify RemoveFromVersionId, MoveToVersionId or both.")
	}
	if h := sec.holder(stage); to != nil && h != nil && h != to && h != from {
		return nil, errf(400, "InvalidParameterException",
			"The parameter RemoveFromVersionId can't be empty. Staging label %s is currently attached to version %s, so you must explicitly reference that version in RemoveFromVersionId.", stage, h.id)
	}
	if stage == StageCurrent && to == nil {
		return nil, errf(400, "InvalidParameterException", "You can only move staging label AWSCURRENT to a different secret version. It can't be completely removed.")
	}
	if to != nil && !to.has(stage) && len(to.stages) >= maxStagesPerCall {
		return nil, errf(400, "LimitExceededException", "A secret version can have at most %d staging labels.", maxStagesPerCall)
	}
	switch {
	case to != nil:
		sec.attach(to, stage)
	default:
		from.drop(stage)
	}
	sec.prune()
	sec.changed = s.now()
	return &arnName{ARN: sec.arn, Name: sec.name}, nil
}

func (s *Server) deleteSecret(in *deleteSecretInput) (*deleteSecretOutput, *Error) {
	if err := checkSecretID(in.SecretId); err != nil {
		return nil, err
	}
	force := in.ForceDeleteWithoutRecovery != nil && *in.ForceDeleteWithoutRecovery
	if in.RecoveryWindowInDays != nil && force {
		return nil, errf(400, "InvalidParameterException", "You can't use ForceDeleteWithoutRecovery in conjunction with RecoveryWindowInDays.")
	}
	days := int64(defaultRecovery)
	if in.RecoveryWindowInDays != nil {
		if days = *in.RecoveryWindowInDays; days < 7 || days > 30 {
			return nil, errf(400, "InvalidParameterException", "The RecoveryWindowInDays value must be between 7 and 30 days (inclusive).")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, err := s.findLocked(*in.SecretId)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := &deleteSecretOutput{ARN: sec.arn, Name: sec.name}
	switch {
	case force:
		delete(s.secrets, sec.name)
		out.DeletionDate = epoch(now)
	case sec.deleted():
		return nil, errMarkedDeleted()
	default:
		sec.deleteAt = now.Add(time.Duration(days) * 24 * time.Hour)
		out.DeletionDate = epoch(sec.deleteAt)
	}
	return out, nil
}

func (s *Server) getRandomPassword(in *getRandomPasswordInput) (*getRandomPasswordOutput, *Error) {
	o := PasswordOptions{
		ExcludeCharacters: deref(in.ExcludeCharacters), ExcludeNumbers: deref(in.ExcludeNumbers),
		ExcludePunctuation: deref(in.ExcludePunctuation), ExcludeUppercase: deref(in.ExcludeUppercase),
		ExcludeLowercase: deref(in.ExcludeLowercase), IncludeSpace: deref(in.IncludeSpace),
		RequireEachIncludedType: in.RequireEachIncludedType,
	}
	if in.PasswordLength != nil {
		if n := *in.PasswordLength; n < 1 || n > MaxPasswordLength {
			v := strconv.FormatInt(n, 10)
			return nil, constraint("passwordLength", &v, fmt.Sprintf("have value between 1 and %d", MaxPasswordLength))
		}
		o.PasswordLength = int(*in.PasswordLength)
	}
	p, err := o.password()
	if err != nil {
		return nil, err
	}
	return &getRandomPasswordOutput{RandomPassword: p}, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
