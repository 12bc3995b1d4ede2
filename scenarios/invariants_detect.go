package scenarios

// The invariants of issue 12 a scenario may focus on.
const (
	Authz          Invariant = "authz"           // another tenant's identifiers are refused, with no data and no effect
	OperatorSecret Invariant = "operator_secret" // the operator's secrets reach no tenant
	SharedPlace    Invariant = "shared_place"    // no tenant secret outside its own home
)

func init() {
	AllInvariants = append(AllInvariants, Authz, OperatorSecret, SharedPlace)
}
