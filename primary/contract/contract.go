package contract

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
)

// Sentinel errors.
var (
	// ErrInvalidContract is wrapped by every error Compile returns: the
	// contract file is malformed, has unknown keys, or violates a naming,
	// typing or size rule. The wrapping message names the command and field.
	ErrInvalidContract = errors.New("contract: invalid contract")
	// ErrInvalidInput is wrapped by every error Plan.Events returns: the
	// command input is not an acceptable JSON object for the plan. The
	// wrapping message names the field but never echoes its value.
	ErrInvalidInput = errors.New("contract: invalid input")
)

// Field types.
const (
	TypeString = "string"
	TypeInt    = "int"
	TypeBool   = "bool"
	TypeBytes  = "bytes"
)

// Limits of a compiled command.
const (
	MaxFields          = 64
	MaxEmits           = 16
	MaxNameLength      = 64
	MaxEventTypeLength = 128
)

// Contract is a compiled contract file: an immutable set of plans, safe for
// concurrent use.
type Contract struct {
	plans  []*Plan // sorted by name
	byName map[string]*Plan
}

// Plan is one compiled command. Plans are immutable once compiled; callers
// must not modify the slices they expose.
type Plan struct {
	// ID is the hex form of the first 16 bytes of the SHA-256 of the plan's
	// canonical description; it is stable across restarts and machines.
	ID string
	// Name is the command name, as used in the HTTP API path.
	Name string
	// Emits lists the event types one execution emits, in contract order.
	Emits []string
	// Fields lists the input fields, sorted by name.
	Fields []Field
}

// Field is one typed input field of a plan.
type Field struct {
	// Name is the JSON key of the field.
	Name string
	// Type is one of TypeString, TypeInt, TypeBool or TypeBytes.
	Type string
	// Optional reports whether the field may be absent (or null).
	Optional bool
}

type file struct {
	Commands map[string]command `toml:"commands"`
}

type command struct {
	Input map[string]string `toml:"input"`
	Emits []string          `toml:"emits"`
}

// Compile parses and validates a contract file. Every error wraps
// ErrInvalidContract and says which command or field is wrong.
func Compile(data []byte) (*Contract, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, tomlError(err)
	}
	if len(f.Commands) == 0 {
		return nil, fmt.Errorf("%w: no commands are defined (add a [commands.<name>] table)", ErrInvalidContract)
	}
	c := &Contract{byName: make(map[string]*Plan, len(f.Commands))}
	for name, cmd := range f.Commands {
		p, err := compileCommand(name, cmd)
		if err != nil {
			return nil, err
		}
		c.plans = append(c.plans, p)
		c.byName[name] = p
	}
	sort.Slice(c.plans, func(i, j int) bool { return c.plans[i].Name < c.plans[j].Name })
	return c, nil
}

func tomlError(err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		keys := make([]string, 0, len(strict.Errors))
		for i := range strict.Errors {
			keys = append(keys, quoteName(strings.Join(strict.Errors[i].Key(), ".")))
		}
		return fmt.Errorf("%w: unknown key %s (a command table holds only input and emits)",
			ErrInvalidContract, strings.Join(keys, ", "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if kind, _, ok := strings.Cut(msg, " into "); ok && strings.HasPrefix(kind, "cannot decode TOML ") {
			// go-toml names the Go struct field; say what the file needs instead.
			msg = "unexpected " + strings.TrimPrefix(kind, "cannot decode ") +
				" (commands holds [commands.<name>] tables; input is a table of field = \"type\" strings; emits is an array of strings)"
		}
		if key := de.Key(); len(key) > 0 {
			return fmt.Errorf("%w: line %d column %d, key %s: %s", ErrInvalidContract, row, col,
				quoteName(strings.Join(key, ".")), msg)
		}
		return fmt.Errorf("%w: line %d column %d: %s", ErrInvalidContract, row, col, msg)
	}
	return fmt.Errorf("%w: %s", ErrInvalidContract, strings.TrimPrefix(err.Error(), "toml: "))
}

func compileCommand(name string, cmd command) (*Plan, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: command name %s must match [a-z][a-z0-9_]{0,63}",
			ErrInvalidContract, quoteName(name))
	}
	if len(cmd.Input) == 0 {
		return nil, fmt.Errorf("%w: command %q: input must declare at least one field", ErrInvalidContract, name)
	}
	if len(cmd.Input) > MaxFields {
		return nil, fmt.Errorf("%w: command %q: input declares %d fields, at most %d are allowed",
			ErrInvalidContract, name, len(cmd.Input), MaxFields)
	}
	p := &Plan{Name: name}
	for fname, typ := range cmd.Input {
		if !validName(fname) {
			return nil, fmt.Errorf("%w: command %q: field name %s must match [a-z][a-z0-9_]{0,63}",
				ErrInvalidContract, name, quoteName(fname))
		}
		base, optional := strings.CutSuffix(typ, "?")
		switch base {
		case TypeString, TypeInt, TypeBool, TypeBytes:
		default:
			return nil, fmt.Errorf("%w: command %q: field %q has unknown type %s (use string, int, bool or bytes, with an optional \"?\" suffix)",
				ErrInvalidContract, name, fname, quoteName(typ))
		}
		p.Fields = append(p.Fields, Field{Name: fname, Type: base, Optional: optional})
	}
	sort.Slice(p.Fields, func(i, j int) bool { return p.Fields[i].Name < p.Fields[j].Name })
	if len(cmd.Emits) == 0 {
		return nil, fmt.Errorf("%w: command %q: emits must list at least one event type", ErrInvalidContract, name)
	}
	if len(cmd.Emits) > MaxEmits {
		return nil, fmt.Errorf("%w: command %q: emits lists %d event types, at most %d are allowed",
			ErrInvalidContract, name, len(cmd.Emits), MaxEmits)
	}
	for i, et := range cmd.Emits {
		if !validEventType(et) {
			return nil, fmt.Errorf("%w: command %q: event type %s must match [a-z][a-z0-9_.]{0,127}",
				ErrInvalidContract, name, quoteName(et))
		}
		if slices.Contains(cmd.Emits[:i], et) {
			return nil, fmt.Errorf("%w: command %q: event type %q is listed twice", ErrInvalidContract, name, et)
		}
	}
	p.Emits = slices.Clone(cmd.Emits)
	p.ID = planID(p)
	return p, nil
}

// planID hashes the canonical description of p. Names and types are drawn
// from restricted alphabets without spaces or newlines, so the line format is
// unambiguous.
func planID(p *Plan) string {
	var b strings.Builder
	b.WriteString("riffdb.contract.plan/v1\n")
	fmt.Fprintf(&b, "command %s\n", p.Name)
	for _, f := range p.Fields {
		fmt.Fprintf(&b, "field %s %s %t\n", f.Name, f.Type, f.Optional)
	}
	for _, e := range p.Emits {
		fmt.Fprintf(&b, "emit %s\n", e)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:16])
}

// Command returns the plan of the named command.
func (c *Contract) Command(name string) (*Plan, bool) {
	p, ok := c.byName[name]
	return p, ok
}

// Commands returns every plan, sorted by name. The slice is a copy; the plans
// are shared.
func (c *Contract) Commands() []*Plan {
	return slices.Clone(c.plans)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLength || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '_') {
			return false
		}
	}
	return true
}

func validEventType(s string) bool {
	if len(s) == 0 || len(s) > MaxEventTypeLength || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '.') {
			return false
		}
	}
	return true
}

// maxQuotedName is how many bytes of a user-supplied name an error message
// quotes (SECURITY.md: an unknown field's name is cut to 64 bytes).
const maxQuotedName = 64

// quoteName quotes a user-supplied name for an error message, cutting a
// longer one to maxQuotedName bytes (at a character boundary, so no
// character is split into escapes) followed by "…", so a message stays
// small and readable.
func quoteName(s string) string {
	if len(s) <= maxQuotedName {
		return fmt.Sprintf("%q", s)
	}
	n := maxQuotedName
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%q…", s[:n])
}
