use super::*;
use http::HeaderValue;

fn config() -> TenantsConfig {
    let mut c: TenantsConfig = serde_yaml::from_str(
        r#"
policies:
  - name: acme
    api_keys: ["sk-acme-0001"]
    weight: 4
    priority: 2
  - name: beta
    header: team-b
    priority: -1
default:
  name: anonymous
  weight: 2
"#,
    )
    .unwrap();
    c.trusted_sources = vec!["10.0.0.0/8".parse().unwrap()];
    c
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

const TRUSTED: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3)));
const STRANGER: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 0, 9)));

#[test]
fn a_known_key_names_its_tenant_from_anyone() {
    let d = Directory::new(&config());
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let h = headers(&[("authorization", &format!("{scheme} sk-acme-0001"))]);
        let id = d.identify(&h, STRANGER).unwrap();
        assert_eq!(&*id.tenant.name, "acme");
        assert_eq!(id.via, Via::ApiKey);
        assert_eq!((id.tenant.weight, id.tenant.priority), (4, 2));
    }
    // The key wins over a header, even a trusted one.
    let h = headers(&[
        ("authorization", "Bearer sk-acme-0001"),
        ("x-warmpath-tenant", "team-b"),
    ]);
    assert_eq!(&*d.identify(&h, TRUSTED).unwrap().tenant.name, "acme");
    assert!(d.strips_authorization());
}

/// An objective picks a priority band ahead of other tenants' work: only a trusted gateway
/// may name one, as only it may name a tenant.
#[test]
fn objectives_count_only_from_trusted_peers() {
    let d = Directory::new(&config());
    for name in [
        "x-llm-d-inference-objective",
        "x-gateway-inference-objective",
    ] {
        let h = headers(&[(name, "chat")]);
        assert_eq!(d.objective(&h, TRUSTED), Some("chat"), "{name}");
        assert_eq!(d.objective(&h, STRANGER), None, "{name}");
        assert_eq!(d.objective(&h, None), None, "{name}");
    }
}

#[test]
fn tenant_headers_count_only_from_trusted_peers() {
    let d = Directory::new(&config());
    for name in [
        "x-warmpath-tenant",
        "x-llm-d-inference-fairness-id",
        "x-gateway-inference-fairness-id",
    ] {
        let h = headers(&[(name, "team-b")]);
        let id = d.identify(&h, TRUSTED).unwrap();
        assert_eq!(&*id.tenant.name, "beta", "{name}");
        assert!(id.tenant.sheddable, "negative priority is sheddable");
        assert_eq!(id.via, Via::Header);
        let ignored = d.identify(&h, STRANGER).unwrap();
        assert_eq!(&*ignored.tenant.name, "anonymous");
        assert_eq!(ignored.via, Via::Default);
        assert_eq!(
            &*d.identify(&h, None).unwrap().tenant.name,
            "anonymous",
            "an unknown peer is not trusted"
        );
    }
    // An IPv4 peer seen through an IPv6 socket is still that peer.
    let mapped = Some(IpAddr::V6("::ffff:10.9.9.9".parse().unwrap()));
    let h = headers(&[("x-warmpath-tenant", "team-b")]);
    assert_eq!(&*d.identify(&h, mapped).unwrap().tenant.name, "beta");
}

#[test]
fn an_unknown_name_is_a_tenant_with_default_settings() {
    let d = Directory::new(&config());
    let h = headers(&[("x-warmpath-tenant", "newcomer")]);
    let id = d.identify(&h, TRUSTED).unwrap();
    assert_eq!(&*id.tenant.name, "newcomer");
    assert_eq!(id.tenant.weight, 2, "the default tenant's weight");
    // A header value that could not be a tenant name is ignored.
    let h = headers(&[("x-warmpath-tenant", "   ")]);
    assert_eq!(&*d.identify(&h, TRUSTED).unwrap().tenant.name, "anonymous");
}

#[test]
fn required_keys_refuse_unknown_and_missing_keys_without_echoing_them() {
    let mut c = config();
    c.require_api_key = true;
    let d = Directory::new(&c);
    let wrong = headers(&[("authorization", "Bearer sk-guess-9999")]);
    let e = d.identify(&wrong, STRANGER).unwrap_err();
    assert_eq!(e.status, http::StatusCode::UNAUTHORIZED);
    assert!(!e.message.contains("sk-guess"), "{}", e.message);
    let e = d.identify(&HeaderMap::new(), STRANGER).unwrap_err();
    assert_eq!(e.status, http::StatusCode::UNAUTHORIZED);
    assert!(e.message.contains("Bearer"), "{}", e.message);
    // A gateway in front that authenticated the client names the tenant instead.
    let h = headers(&[("x-warmpath-tenant", "acme")]);
    assert_eq!(&*d.identify(&h, TRUSTED).unwrap().tenant.name, "acme");
    assert!(d.identify(&h, STRANGER).is_err());
}

#[test]
fn without_keys_the_authorization_header_is_the_engines() {
    let mut c = config();
    c.policies.iter_mut().for_each(|p| p.api_keys.clear());
    let d = Directory::new(&c);
    assert!(!d.strips_authorization());
    let h = headers(&[("authorization", "Bearer engine-key")]);
    assert_eq!(d.identify(&h, STRANGER).unwrap().via, Via::Default);
    let mut forward = config();
    forward.forward_api_key = true;
    assert!(!Directory::new(&forward).strips_authorization());
}

#[test]
fn bearer_parsing() {
    assert_eq!(bearer("Bearer abc"), Some("abc"));
    assert_eq!(bearer("  bearer   abc  "), Some("abc"));
    assert_eq!(bearer("Basic abc"), None);
    assert_eq!(bearer("Bearer"), None);
    assert_eq!(bearer("Bearer "), None);
}

#[test]
fn an_objective_sets_the_band_and_a_negative_one_sheds() {
    let policy = |priority, sheddable| TenantPolicyConfig {
        name: "t".to_owned(),
        priority,
        sheddable,
        ..TenantPolicyConfig::default()
    };
    let o = |priority| Objective {
        name: Arc::from("o"),
        priority,
    };
    let plain = Tenant::from_policy(Arc::from("t"), &policy(3, false));
    assert_eq!(plain.band(None), (3, false));
    assert_eq!(plain.band(Some(&o(7))), (7, false));
    assert_eq!(plain.band(Some(&o(-2))), (-2, true), "negative sheds");
    // Sheddable by its negative priority only: an objective's priority replaces it.
    let low = Tenant::from_policy(Arc::from("t"), &policy(-1, false));
    assert_eq!(low.band(None), (-1, true));
    assert_eq!(low.band(Some(&o(5))), (5, false));
    // `sheddable: true` stays whatever the objective.
    let shed = Tenant::from_policy(Arc::from("t"), &policy(0, true));
    assert_eq!(shed.band(Some(&o(5))), (5, true));
}
