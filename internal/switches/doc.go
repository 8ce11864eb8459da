// Package switches is the registry of dflash's environment switches: every
// DFLASH_* variable that non-test code reads is declared once, in table.go,
// with its name, type, default, one line of documentation and whether it
// changes numerical results. Only this package reads those variables from
// the environment; libraries ask a declared switch for its typed value
// (NoASM.Value(), FlexFwd.Value(), ...).
//
// One parse rule per type, the same for every switch of the type:
//
//   - Bool: 1, 0, true, false, yes, no, on, off, in any case.
//   - Int: a decimal integer within the switch's range.
//   - Uint: a decimal unsigned 64-bit integer.
//   - Enum: one of the switch's values, in any case.
//   - String: any text (a path, a token).
//
// Surrounding spaces are dropped, and an empty value is the default. A value
// that does not parse is an error naming the variable, the value and what
// is accepted; it is never ignored. Validate checks every switch at once
// (cmd/dflash does so before any command runs); Settings lists them with
// their values (dflash doctor), and Identity returns the numeric ones that
// are not at their default, for a training run's identity. docs/SWITCHES.md
// is generated from the table (Markdown).
package switches
