package smstandin

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Password generation, shared by GetRandomPassword and a template's
// GenerateSecretString.
const (
	DefaultPasswordLength = 32
	MaxPasswordLength     = 4096
	// Punctuation is what Secrets Manager puts in passwords besides letters,
	// digits and (when asked) the space.
	Punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
	lowercase   = "abcdefghijklmnopqrstuvwxyz"
	uppercase   = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digits      = "0123456789"
)

// PasswordOptions are GetRandomPassword's parameters; the JSON names are
// the API's and CloudFormation's, so a template's GenerateSecretString
// decodes into GenerateSecretString directly.
type PasswordOptions struct {
	// PasswordLength is 1 to 4096; 0 means DefaultPasswordLength.
	PasswordLength     int    `json:"PasswordLength,omitempty"`
	ExcludeCharacters  string `json:"ExcludeCharacters,omitempty"`
	ExcludeNumbers     bool   `json:"ExcludeNumbers,omitempty"`
	ExcludePunctuation bool   `json:"ExcludePunctuation,omitempty"`
	ExcludeUppercase   bool   `json:"ExcludeUppercase,omitempty"`
	ExcludeLowercase   bool   `json:"ExcludeLowercase,omitempty"`
	IncludeSpace       bool   `json:"IncludeSpace,omitempty"`
	// RequireEachIncludedType asks for at least one character of each
	// included type (lowercase, uppercase, digit, punctuation); nil means
	// true, AWS's default.
	RequireEachIncludedType *bool `json:"RequireEachIncludedType,omitempty"`
}

// RandomPassword generates a password as GetRandomPassword does, from
// crypto/rand. Its errors are *Error.
func RandomPassword(o PasswordOptions) (string, error) {
	p, err := o.password()
	if err != nil {
		return "", err
	}
	return p, nil
}

func (o PasswordOptions) password() (string, *Error) {
	n := o.PasswordLength
	if n == 0 {
		n = DefaultPasswordLength
	}
	if n < 1 || n > MaxPasswordLength {
		v := fmt.Sprint(n)
		return "", constraint("passwordLength", &v, fmt.Sprintf("have value between 1 and %d", MaxPasswordLength))
	}
	if len(o.ExcludeCharacters) > MaxPasswordLength {
		return "", constraint("excludeCharacters", nil, fmt.Sprintf("have length less than or equal to %d", MaxPasswordLength))
	}
	keep := func(set string, excluded bool) string {
		if excluded {
			return ""
		}
		return strings.Map(func(r rune) rune {
			if strings.ContainsRune(o.ExcludeCharacters, r) {
				return -1
			}
			return r
		}, set)
	}
	types := []string{
		keep(lowercase, o.ExcludeLowercase), keep(uppercase, o.ExcludeUppercase),
		keep(digits, o.ExcludeNumbers), keep(Punctuation, o.ExcludePunctuation),
	}
	all := strings.Join(types, "") + keep(" ", !o.IncludeSpace)
	if all == "" {
		return "", errf(400, "InvalidParameterException", "The password can't be generated: every character is excluded.")
	}
	var req []string
	if o.RequireEachIncludedType == nil || *o.RequireEachIncludedType {
		for _, t := range types {
			if t != "" {
				req = append(req, t)
			}
		}
	}
	if len(req) > n {
		return "", errf(400, "InvalidParameterException", "Password length is too short based on the required types.")
	}
	b := make([]byte, n)
	for i := range b {
		set := all
		if i < len(req) {
			set = req[i]
		}
		b[i] = set[randInt(len(set))]
	}
	// The required characters went first; shuffle them anywhere.
	for i := len(b) - 1; i > 0; i-- {
		j := randInt(i + 1)
		b[i], b[j] = b[j], b[i]
	}
	return string(b), nil
}

// GenerateSecretString is CloudFormation's AWS::SecretsManager::Secret
// GenerateSecretString: a password, or, with SecretStringTemplate (a JSON
// object) and GenerateStringKey, that object with the password added under
// the key.
type GenerateSecretString struct {
	PasswordOptions
	SecretStringTemplate string `json:"SecretStringTemplate,omitempty"`
	GenerateStringKey    string `json:"GenerateStringKey,omitempty"`
}

// Generate makes a secret string. Its errors never hold the password.
func (g GenerateSecretString) Generate() (string, error) {
	if (g.SecretStringTemplate == "") != (g.GenerateStringKey == "") {
		return "", fmt.Errorf("smstandin: GenerateSecretString needs both SecretStringTemplate and GenerateStringKey, or neither")
	}
	p, aerr := g.password()
	if aerr != nil {
		return "", aerr
	}
	if g.SecretStringTemplate == "" {
		return p, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(g.SecretStringTemplate), &obj); err != nil || obj == nil {
		return "", fmt.Errorf("smstandin: SecretStringTemplate is not a JSON object")
	}
	if _, ok := obj[g.GenerateStringKey]; ok {
		return "", fmt.Errorf("smstandin: SecretStringTemplate already has the GenerateStringKey %q", g.GenerateStringKey)
	}
	v, _ := json.Marshal(p)
	obj[g.GenerateStringKey] = v
	out, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("smstandin: cannot build the secret string from its template")
	}
	return string(out), nil
}
