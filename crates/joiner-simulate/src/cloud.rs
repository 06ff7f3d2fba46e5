//! An in-process cloud over the engine's catalog, deterministic and with injectable faults, for
//! tests, `joiner simulate` and the live controller's `--cloud simulated`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use joiner_engine::catalog::Catalog;
use joiner_model::wellknown::tags;
use k8s_openapi::jiff::Timestamp;

use joiner_controller::clock::{Clock, add};
use joiner_controller::cloud::{
    CloudError, CloudInstanceType, CloudOffering, CloudProvider, Instance, InstanceState,
    LaunchRequest, Launched, NodeClassResolution, OfferingKey, Resolved,
};
use joiner_model::api::EC2NodeClass;

use crate::network::{self, SimulatedNetwork};
use crate::placement::SimulatedPlacement;
use crate::reservations::Reservations;

/// When the kubelet of an instance registers its Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// This long after launch.
    After(Duration),
    /// Never (a bad AMI, a broken bootstrap): exercises the registration timeout.
    Never,
}

#[derive(Debug, Default)]
struct State {
    /// Every instance ever launched, terminated ones included, by id.
    instances: BTreeMap<String, Instance>,
    launched: u64,
    /// Client token to instance id, so a retried launch returns the first instance.
    tokens: BTreeMap<String, String>,
    no_capacity: BTreeSet<OfferingKey>,
    /// Messages of launch failures to return, one per launch call, first first.
    launch_errors: Vec<String>,
    /// Messages of permanent launch failures (unauthorized, invalid parameter) to return.
    launch_rejections: Vec<String>,
    /// How many more API calls are throttled.
    throttled_calls: u32,
    registration: BTreeMap<String, Registration>,
    launch_calls: u64,
    /// Instances the cloud takes back (a spot interruption) at the given time.
    reclaims: BTreeMap<String, k8s_openapi::jiff::Timestamp>,
    /// When each terminated instance was terminated.
    terminated_at: BTreeMap<String, Timestamp>,
    /// Every TerminateInstances call that reached the cloud, by instance id, in order.
    terminate_calls: Vec<String>,
    /// When each instance was rebooted (RebootInstances), oldest first.
    reboots: BTreeMap<String, Vec<Timestamp>>,
    /// How far listings trail launches and terminations, and how long a fresh instance reads
    /// as NotFound (EC2's eventual consistency).
    list_lag: Duration,
    /// How many more launches start their instance and then answer a timeout.
    launch_timeouts: u32,
    /// How many more TerminateInstances calls fail before they reach the instance.
    termination_failures: u32,
    /// Offerings whose price moved from the catalog's (spot prices change every few minutes).
    prices: BTreeMap<OfferingKey, joiner_model::Price>,
    /// The VPC when it is closed (see `network`); `None` is the open world.
    network: Option<SimulatedNetwork>,
    /// How many more EC2NodeClass resolutions fail as throttled.
    resolution_failures: u32,
    /// Instance profiles by name, with the role each holds.
    profiles: BTreeMap<String, String>,
    /// Instance profiles deleted, in order: a launch naming one is refused, as EC2 refuses
    /// an `IamInstanceProfile` that does not exist.
    deleted_profiles: Vec<String>,
    /// The account's capacity reservations and Capacity Blocks.
    reservations: Reservations,
    /// The account's placement groups, and the instances launched into them.
    placement: SimulatedPlacement,
}

/// A cloud in memory. Instance ids count up from `i-00000000000000001` in launch order.
pub struct SimulatedCloud {
    types: Vec<CloudInstanceType>,
    clock: Box<dyn Clock + Send + Sync>,
    default_registration: Registration,
    state: Mutex<State>,
}

impl std::fmt::Debug for SimulatedCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedCloud")
            .field("types", &self.types.len())
            .field("state", &*self.lock())
            .finish()
    }
}

impl SimulatedCloud {
    /// A cloud selling `catalog`'s offerings at its prices. Instances register 30 s after
    /// launch unless told otherwise.
    pub fn new(catalog: &Catalog, clock: impl Clock + Send + Sync + 'static) -> SimulatedCloud {
        let types = catalog
            .types()
            .iter()
            .map(|t| CloudInstanceType {
                facts: None,
                name: t.name.clone(),
                offerings: t
                    .offerings
                    .iter()
                    .map(|o| CloudOffering {
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type,
                        price: o.price,
                        available: o.available,
                        price_basis: o.price_basis,
                    })
                    .collect(),
            })
            .collect();
        SimulatedCloud {
            types,
            clock: Box::new(clock),
            default_registration: Registration::After(Duration::from_secs(30)),
            state: Mutex::new(State::default()),
        }
    }

    /// Closes the simulated VPC: from now on only `network`'s subnets and security groups
    /// exist, and EC2NodeClass selectors are matched against them as EC2 matches them.
    pub fn set_network(&self, network: SimulatedNetwork) {
        self.lock().network = Some(network);
    }

    /// Creates a placement group (`available` at once), replacing one of the same name or ID.
    pub fn add_placement_group(&self, group: joiner_model::placement::PlacementGroup) {
        self.lock().placement.add(group);
    }

    /// Deletes the placement group named `name`.
    pub fn delete_placement_group(&self, name: &str) {
        self.lock().placement.delete(name);
    }

    /// The placement group (and partition) an instance was launched into.
    pub fn placement_of(&self, instance_id: &str) -> Option<crate::placement::Placed> {
        self.lock().placement.of(instance_id).cloned()
    }

    /// The next `n` EC2NodeClass resolutions fail as throttled (their own fault, apart from
    /// [`SimulatedCloud::throttle_next_calls`], so instance faults and class faults can be
    /// tested apart).
    pub fn fail_next_resolutions(&self, n: u32) {
        self.lock().resolution_failures = n;
    }

    /// The instance profiles made for EC2NodeClass roles, by name, with their role.
    pub fn instance_profiles(&self) -> BTreeMap<String, String> {
        self.lock().profiles.clone()
    }

    /// The instance profiles deleted so far, in order.
    pub fn deleted_instance_profiles(&self) -> Vec<String> {
        self.lock().deleted_profiles.clone()
    }

    /// How instances register unless [`SimulatedCloud::set_registration`] says otherwise.
    pub fn with_default_registration(mut self, registration: Registration) -> SimulatedCloud {
        self.default_registration = registration;
        self
    }

    /// A poisoned lock means a simulated crash unwound through a caller; the state is a set of
    /// maps each updated in one operation, so it is still consistent.
    /// Every call sees instances whose reclaim time has come terminated.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !s.reclaims.is_empty() {
            let now = self.clock.now();
            let due: Vec<String> = s
                .reclaims
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in due {
                s.reclaims.remove(&id);
                if let Some(i) = s.instances.get_mut(&id) {
                    i.state = InstanceState::Terminated;
                }
                s.terminated_at.insert(id, now);
            }
        }
        s
    }

    /// Adds a capacity reservation (or, with `reservationType: capacity-block` and an end
    /// time, a Capacity Block) of `total` instances, carrying `tags`; `state` and
    /// `availableInstanceCount` are the cloud's to say.
    pub fn add_capacity_reservation(
        &self,
        reservation: joiner_model::api::nodeclass_status::CapacityReservation,
        tags: BTreeMap<String, String>,
        total: u32,
    ) {
        self.lock().reservations.add(reservation, tags, total);
    }

    /// The world the manifests describe: every reservation an EC2NodeClass's status names
    /// exists, holding as many instances as its `availableInstanceCount` says (one when it says
    /// none), tagged as the class's first tag term selects, so resolving the class finds it.
    pub fn add_reservations_of(&self, classes: &[joiner_model::Sourced<EC2NodeClass>]) {
        for class in classes.iter().map(|c| &c.object) {
            let tags = class
                .spec
                .capacity_reservation_selector_terms
                .iter()
                .find(|t| !t.tags.is_empty())
                .map(|t| t.tags.clone())
                .unwrap_or_default();
            let Some(status) = &class.status else {
                continue;
            };
            for r in &status.capacity_reservations {
                self.add_capacity_reservation(r.clone(), tags.clone(), r.free_instances());
            }
        }
    }

    /// Removes a tag from an instance, as someone with DeleteTags would. Returns whether the
    /// instance had it.
    pub fn remove_tag(&self, instance_id: &str, key: &str) -> bool {
        self.lock()
            .instances
            .get_mut(instance_id)
            .is_some_and(|i| i.tags.remove(key).is_some())
    }

    /// The cloud takes the instance back `notice` from now (a spot interruption: EC2 gives two
    /// minutes). Returns false for an instance that is unknown or already terminated.
    pub fn reclaim_after(&self, instance_id: &str, notice: Duration) -> bool {
        let at = add(self.clock.now(), notice);
        let mut s = self.lock();
        let running = s
            .instances
            .get(instance_id)
            .is_some_and(|i| i.state != InstanceState::Terminated);
        if running {
            s.reclaims.insert(instance_id.to_string(), at);
        }
        running
    }

    /// The offering's price is `price` from now on, as EC2 reports it (a spot price moving).
    pub fn set_price(&self, offering: OfferingKey, price: joiner_model::Price) {
        self.lock().prices.insert(offering, price);
    }

    /// Makes an offering fail with insufficient capacity (or succeed again).
    pub fn set_insufficient_capacity(&self, offering: OfferingKey, short: bool) {
        let mut s = self.lock();
        if short {
            s.no_capacity.insert(offering);
        } else {
            s.no_capacity.remove(&offering);
        }
    }

    /// The next `n` launch calls fail with `message` (a non-capacity error).
    pub fn fail_next_launches(&self, n: usize, message: &str) {
        let mut s = self.lock();
        s.launch_errors
            .extend(std::iter::repeat_n(message.to_string(), n));
    }

    /// The next `n` launch calls are rejected with `message`, as EC2 rejects a request it
    /// will never accept (`UnauthorizedOperation`, `InvalidParameterValue`).
    pub fn reject_next_launches(&self, n: usize, message: &str) {
        let mut s = self.lock();
        s.launch_rejections
            .extend(std::iter::repeat_n(message.to_string(), n));
    }

    /// The next `n` API calls of any kind are throttled.
    pub fn throttle_next_calls(&self, n: u32) {
        self.lock().throttled_calls = n;
    }

    /// Listings trail launches and terminations by `lag`, and an instance launched less than
    /// `lag` ago reads as NotFound, as EC2's eventually consistent API answers.
    pub fn set_list_lag(&self, lag: Duration) {
        self.lock().list_lag = lag;
    }

    /// The next `n` launches start their instance and then answer a timeout, as a CreateFleet
    /// whose answer was lost does: only the client token finds that instance again.
    pub fn time_out_next_launches(&self, n: u32) {
        let mut s = self.lock();
        s.launch_timeouts = s.launch_timeouts.saturating_add(n);
    }

    /// Puts an instance into the cloud that Joiner did not launch (a managed node group's, a
    /// self-managed node, another cluster's, Karpenter's), with the id and tags given. Fails on
    /// an id already taken.
    pub fn add_instance(
        &self,
        id: &str,
        offering: &OfferingKey,
        tags: BTreeMap<String, String>,
    ) -> Result<Instance, String> {
        let mut s = self.lock();
        if s.instances.contains_key(id) {
            return Err(format!("instance {id} already exists"));
        }
        let mut instance = self.start_instance(&mut s, offering, tags, None);
        s.instances.remove(&instance.id);
        instance.id = id.to_string();
        s.instances.insert(instance.id.clone(), instance.clone());
        Ok(instance)
    }

    /// Every TerminateInstances call that reached the cloud, by instance id, in order.
    pub fn terminate_calls(&self) -> Vec<String> {
        self.lock().terminate_calls.clone()
    }

    /// How long a reboot keeps an instance's node away: the operating system restarting, the
    /// GPU driver loading and the kubelet registering again.
    pub const REBOOT_TIME: Duration = Duration::from_secs(180);

    /// When the instance was rebooted, oldest first.
    pub fn reboots_of(&self, instance_id: &str) -> Vec<Timestamp> {
        self.lock()
            .reboots
            .get(instance_id)
            .cloned()
            .unwrap_or_default()
    }

    /// The next `n` TerminateInstances calls fail (the connection drops before EC2 answers)
    /// and leave the instance running.
    pub fn fail_next_terminations(&self, n: u32) {
        self.lock().termination_failures = n;
    }

    /// How the instance with this id (known in advance: ids are sequential) registers.
    pub fn set_registration(&self, instance_id: &str, registration: Registration) {
        self.lock()
            .registration
            .insert(instance_id.to_string(), registration);
    }

    /// When the instance registers.
    pub fn registration_of(&self, instance_id: &str) -> Registration {
        self.lock()
            .registration
            .get(instance_id)
            .copied()
            .unwrap_or(self.default_registration)
    }

    /// The id the `n`th launched instance gets (1-based).
    pub fn instance_id(n: u64) -> String {
        format!("i-{n:017x}")
    }

    /// Every instance ever launched, terminated ones included, by id.
    pub fn all_instances(&self) -> Vec<Instance> {
        self.lock().instances.values().cloned().collect()
    }

    /// How many launch calls reached the cloud (throttled ones included).
    pub fn launch_calls(&self) -> u64 {
        self.lock().launch_calls
    }

    /// Launches an instance tagged as given with no NodeClaim behind it (a leak from elsewhere).
    pub fn launch_untracked(
        &self,
        offering: &OfferingKey,
        tags: BTreeMap<String, String>,
    ) -> Instance {
        let mut s = self.lock();
        self.start_instance(&mut s, offering, tags, None)
    }

    fn throttled(s: &mut State) -> bool {
        if s.throttled_calls > 0 {
            s.throttled_calls -= 1;
            true
        } else {
            false
        }
    }

    fn start_instance(
        &self,
        s: &mut State,
        offering: &OfferingKey,
        tags: BTreeMap<String, String>,
        instance_profile: Option<String>,
    ) -> Instance {
        s.launched += 1;
        let n = s.launched;
        let instance = Instance {
            id: SimulatedCloud::instance_id(n),
            instance_type: offering.instance_type.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
            image_id: "ami-0000000000000sim0".to_string(),
            private_dns_name: format!("ip-10-0-{}-{}.ec2.internal", (n >> 8) & 0xff, n & 0xff),
            state: InstanceState::Running,
            tags,
            launch_time: self.clock.now(),
            instance_profile,
        };
        s.instances.insert(instance.id.clone(), instance.clone());
        instance
    }

    /// The moment the cloud's eventually consistent reads have caught up to.
    fn seen_since(&self, s: &State) -> Timestamp {
        let now = self.clock.now();
        let lag = k8s_openapi::jiff::SignedDuration::try_from(s.list_lag)
            .unwrap_or(k8s_openapi::jiff::SignedDuration::ZERO);
        now.checked_sub(lag).unwrap_or(now)
    }

    fn sells(&self, o: &OfferingKey) -> bool {
        self.types.iter().any(|t| {
            t.name == o.instance_type
                && t.offerings
                    .iter()
                    .any(|x| x.available && x.zone == o.zone && x.capacity_type == o.capacity_type)
        })
    }
}

impl CloudProvider for SimulatedCloud {
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        let mut s = self.lock();
        s.launch_calls += 1;
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        if let Some(id) = s.tokens.get(&request.client_token)
            && let Some(instance) = s.instances.get(id)
        {
            return Ok(Launched {
                instance: instance.clone(),
                insufficient: Vec::new(),
                user_data_bytes: None,
            });
        }
        if !s.launch_errors.is_empty() {
            let message = s.launch_errors.remove(0);
            return Err(CloudError::Other(message));
        }
        if !s.launch_rejections.is_empty() {
            let message = s.launch_rejections.remove(0);
            return Err(CloudError::Rejected(message));
        }
        // The profile the class gives its nodes, as the real launch resolves it.
        let profile = request.node_class_spec.as_ref().and_then(|c| {
            c.spec
                .instance_profile
                .clone()
                .or_else(|| c.status.as_ref()?.instance_profile.clone())
        });
        if let Some(p) = profile.as_ref().filter(|p| s.deleted_profiles.contains(p)) {
            return Err(CloudError::Rejected(format!(
                "InvalidParameterValue: Value ({p}) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name"
            )));
        }
        let target = s.placement.target(request)?;
        let mut insufficient = Vec::new();
        for offer in &request.offers {
            if let Some(t) = &target {
                let running = s
                    .instances
                    .values()
                    .filter(|i| i.state != InstanceState::Terminated)
                    .map(|i| (i.id.as_str(), i.zone.as_str()));
                if s.placement.full(t, &offer.offering.zone, running) {
                    insufficient.push(offer.offering.clone());
                    continue;
                }
            }
            if let Some(r) = &offer.reservation {
                // Launched into the reservation or not at all (`ReservationCapacityExceeded`).
                let next = SimulatedCloud::instance_id(s.launched + 1);
                let now = self.clock.now();
                let instances = s.instances.clone();
                let running = |id: &str| {
                    instances
                        .get(id)
                        .is_some_and(|i| i.state != InstanceState::Terminated)
                };
                let key = &offer.offering;
                let taken = s.reservations.take(
                    &r.id,
                    (&key.instance_type, &key.zone),
                    &next,
                    now,
                    running,
                );
                match taken {
                    Err(()) => {
                        insufficient.push(offer.offering.clone());
                        continue;
                    }
                    Ok(reclaim) => {
                        let instance = self.start_instance(
                            &mut s,
                            &offer.offering,
                            request.tags.clone(),
                            profile.clone(),
                        );
                        if let Some(t) = target.clone() {
                            s.placement.record(&instance.id, t);
                        }
                        if let Some(at) = reclaim {
                            s.reclaims.insert(instance.id.clone(), at);
                        }
                        s.tokens
                            .insert(request.client_token.clone(), instance.id.clone());
                        return Ok(Launched {
                            instance,
                            insufficient,
                            user_data_bytes: None,
                        });
                    }
                }
            }
            if !self.sells(&offer.offering) {
                continue;
            }
            if s.no_capacity.contains(&offer.offering) {
                insufficient.push(offer.offering.clone());
                continue;
            }
            let instance = self.start_instance(
                &mut s,
                &offer.offering,
                request.tags.clone(),
                profile.clone(),
            );
            if let Some(t) = target {
                s.placement.record(&instance.id, t);
            }
            s.tokens
                .insert(request.client_token.clone(), instance.id.clone());
            if s.launch_timeouts > 0 {
                s.launch_timeouts -= 1;
                return Err(CloudError::Other(
                    "CreateFleet: operation timeout (the request may have succeeded)".into(),
                ));
            }
            return Ok(Launched {
                instance,
                insufficient,
                user_data_bytes: None,
            });
        }
        if insufficient.is_empty() {
            Err(CloudError::NoOfferings)
        } else {
            Err(CloudError::InsufficientCapacity(insufficient))
        }
    }

    fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        if s.termination_failures > 0 {
            s.termination_failures -= 1;
            return Err(CloudError::Other(
                "TerminateInstances: connection reset before a response".into(),
            ));
        }
        s.terminate_calls.push(instance_id.to_string());
        let now = self.clock.now();
        if let Some(i) = s.instances.get_mut(instance_id)
            && i.state != InstanceState::Terminated
        {
            i.state = InstanceState::Terminated;
            s.terminated_at.insert(instance_id.to_string(), now);
        }
        Ok(())
    }

    fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        let running = s
            .instances
            .get(instance_id)
            .is_some_and(|i| i.state == InstanceState::Running);
        if !running {
            // EC2 answers InvalidInstanceID.NotFound or IncorrectState.
            return Err(CloudError::Rejected(format!(
                "RebootInstances: {instance_id} is not a running instance"
            )));
        }
        let now = self.clock.now();
        s.reboots
            .entry(instance_id.to_string())
            .or_default()
            .push(now);
        Ok(())
    }

    fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        let seen_since = self.seen_since(&s);
        Ok(s.instances
            .get(instance_id)
            .filter(|i| i.launch_time <= seen_since)
            .cloned())
    }

    fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        // The listing shows the cloud as it was `list_lag` ago: not what launched since, and
        // what terminated since as still running.
        let seen_since = self.seen_since(&s);
        Ok(s.instances
            .values()
            .filter(|i| i.launch_time <= seen_since && tags::is_owned(&i.tags, cluster_name))
            .filter_map(|i| match s.terminated_at.get(&i.id) {
                Some(at) if *at <= seen_since => None,
                Some(_) => Some(Instance {
                    state: InstanceState::Running,
                    ..i.clone()
                }),
                None => (i.state != InstanceState::Terminated).then(|| i.clone()),
            })
            .collect())
    }

    fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        let mut types = self.types.clone();
        for t in &mut types {
            for o in &mut t.offerings {
                let key = OfferingKey {
                    instance_type: t.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type,
                };
                if let Some(price) = s.prices.get(&key) {
                    o.price = *price;
                }
            }
        }
        Ok(types)
    }

    /// Resolves against the simulated world (see `network`). A class naming `spec.role` gets
    /// the profile its status names while that holds the role, else `<class>_<role>`, made
    /// once.
    fn resolve_node_class(&self, class: &EC2NodeClass) -> NodeClassResolution {
        let mut s = self.lock();
        if s.resolution_failures > 0 {
            s.resolution_failures -= 1;
            return NodeClassResolution::failed(CloudError::Throttled);
        }
        let zones: BTreeSet<String> = self
            .types
            .iter()
            .flat_map(|t| t.offerings.iter().map(|o| o.zone.clone()))
            .collect();
        let spec = &class.spec;
        let instance_profile = match (&spec.instance_profile, &spec.role) {
            (Some(profile), _) => Resolved::Found(profile.clone()),
            (None, Some(role)) => {
                let recorded = class
                    .status
                    .as_ref()
                    .and_then(|st| st.instance_profile.clone())
                    .filter(|p| s.profiles.get(p) == Some(role));
                let name = recorded.unwrap_or_else(|| {
                    format!(
                        "{}_{role}",
                        class.metadata.name.as_deref().unwrap_or_default()
                    )
                });
                s.profiles.insert(name.clone(), role.clone());
                Resolved::Found(name)
            }
            // The open world has a profile for a class that names none (files written for
            // `joiner plan` often leave both out); a closed one does not, as EC2 would not.
            (None, None) if s.network.is_none() => Resolved::Found(format!(
                "{}_simulated",
                class.metadata.name.as_deref().unwrap_or_default()
            )),
            (None, None) => {
                Resolved::NotFound("neither spec.role nor spec.instanceProfile is set".into())
            }
        };
        let running = |id: &str| {
            s.instances
                .get(id)
                .is_some_and(|i| i.state != InstanceState::Terminated)
        };
        let capacity_reservations = Resolved::Found(s.reservations.select(
            &spec.capacity_reservation_selector_terms,
            self.clock.now(),
            running,
        ));
        NodeClassResolution {
            placement_group: s.placement.resolve(spec.placement_group_selector.as_ref()),
            capacity_reservations,
            subnets: network::subnets(s.network.as_ref(), &zones, &spec.subnet_selector_terms),
            security_groups: network::security_groups(
                s.network.as_ref(),
                &spec.security_group_selector_terms,
            ),
            amis: network::amis(class),
            instance_profile,
        }
    }

    /// The simulated cloud launches without templates.
    fn delete_unused_launch_templates(
        &self,
        _node_classes: &[joiner_model::api::EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        Ok(Vec::new())
    }

    /// Every profile made for a class's role: the simulated account holds one cluster.
    fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        Ok(s.profiles.keys().cloned().collect())
    }

    fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError> {
        let mut s = self.lock();
        if Self::throttled(&mut s) {
            return Err(CloudError::Throttled);
        }
        if s.profiles.remove(name).is_some() {
            s.deleted_profiles.push(name.to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use joiner_controller::clock::ManualClock;
    use joiner_controller::cloud::Offer;
    use joiner_engine::catalog::CapacityType;

    use super::*;

    fn offer(zone: &str) -> Offer {
        Offer {
            offering: OfferingKey {
                instance_type: "g4dn.xlarge".into(),
                zone: zone.into(),
                capacity_type: CapacityType::OnDemand,
            },
            price: joiner_model::Price::ZERO,
            reservation: None,
        }
    }

    fn request(token: &str) -> LaunchRequest {
        let tags = tags::ownership("c", "default", "default");
        LaunchRequest {
            node_claim: "n".into(),
            node_class: "default".into(),
            offers: vec![offer("us-east-1a"), offer("us-east-1b")],
            tags,
            client_token: token.into(),
            ..LaunchRequest::default()
        }
    }

    #[test]
    fn launches_are_idempotent_and_fall_back_past_insufficient_capacity() {
        let zones = vec!["us-east-1a".to_string(), "us-east-1b".to_string()];
        let cloud = SimulatedCloud::new(&Catalog::builtin("us-east-1", &zones), ManualClock::new());
        cloud.set_insufficient_capacity(offer("us-east-1a").offering, true);
        let first = cloud.launch(&request("t1")).expect("launch");
        assert_eq!(first.instance.zone, "us-east-1b");
        assert_eq!(first.insufficient, vec![offer("us-east-1a").offering]);
        assert_eq!(first.instance.id, SimulatedCloud::instance_id(1));
        // The same token returns the same instance.
        let again = cloud.launch(&request("t1")).expect("launch");
        assert_eq!(again.instance.id, first.instance.id);
        assert_eq!(cloud.list("c").expect("list").len(), 1);
        cloud.set_insufficient_capacity(offer("us-east-1b").offering, true);
        assert!(matches!(
            cloud.launch(&request("t2")),
            Err(CloudError::InsufficientCapacity(k)) if k.len() == 2
        ));
        cloud.throttle_next_calls(1);
        assert_eq!(cloud.list("c"), Err(CloudError::Throttled));
        cloud.terminate(&first.instance.id).expect("terminate");
        assert!(cloud.list("c").expect("list").is_empty());
    }

    #[test]
    fn a_reclaimed_instance_terminates_when_its_notice_runs_out() {
        let zones = vec!["us-east-1a".to_string()];
        let clock = ManualClock::new();
        let cloud = SimulatedCloud::new(&Catalog::builtin("us-east-1", &zones), clock.clone());
        let id = cloud.launch(&request("t")).expect("launch").instance.id;
        assert!(cloud.reclaim_after(&id, Duration::from_secs(120)));
        clock.advance(Duration::from_secs(119));
        assert_eq!(cloud.list("c").expect("list").len(), 1);
        clock.advance(Duration::from_secs(1));
        assert!(cloud.list("c").expect("list").is_empty());
        assert_eq!(
            cloud.get(&id).expect("get").map(|i| i.state),
            Some(InstanceState::Terminated)
        );
        assert!(!cloud.reclaim_after(&id, Duration::from_secs(120)));
    }

    /// The reservations a scenario's classes record exist in its world: resolving the class
    /// finds them with their counts, and launches into them stop at the count.
    #[test]
    fn reservations_named_in_class_statuses_exist_and_fill_up() {
        let class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "train"},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "capacityReservationSelectorTerms": [{"tags": {"team": "ml"}}]},
            "status": {"capacityReservations": [{
                "id": "cr-1", "availabilityZone": "us-east-1a", "instanceType": "g4dn.xlarge",
                "instanceMatchCriteria": "targeted", "ownerID": "0", "availableInstanceCount": 1}]}
        }))
        .expect("class");
        let zones = vec!["us-east-1a".to_string()];
        let cloud = SimulatedCloud::new(&Catalog::builtin("us-east-1", &zones), ManualClock::new());
        cloud.add_reservations_of(&[joiner_model::Sourced {
            origin: joiner_model::Source::new("train.yaml", 1),
            object: class.clone(),
        }]);
        let Resolved::Found(found) = cloud.resolve_node_class(&class).capacity_reservations else {
            panic!("resolved");
        };
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].available_instance_count, Some(1));
        let mut reserved = request("r1");
        reserved.offers = vec![Offer {
            offering: OfferingKey {
                capacity_type: CapacityType::Reserved,
                ..offer("us-east-1a").offering
            },
            price: joiner_model::Price::ZERO,
            reservation: Some(joiner_engine::scheduling::OfferedReservation {
                id: "cr-1".into(),
                capacity_block: false,
                interruptible: false,
                free: 1,
            }),
        }];
        let launched = cloud.launch(&reserved).expect("launch");
        assert_eq!(launched.instance.capacity_type, CapacityType::Reserved);
        reserved.client_token = "r2".into();
        assert!(matches!(
            cloud.launch(&reserved),
            Err(CloudError::InsufficientCapacity(_))
        ));
        let Resolved::Found(full) = cloud.resolve_node_class(&class).capacity_reservations else {
            panic!("resolved");
        };
        assert_eq!(full[0].available_instance_count, Some(0));
    }
}
