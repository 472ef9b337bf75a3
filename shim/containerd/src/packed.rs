//! Messages packed into a protobuf `Any` under the bare message name containerd resolves.
//!
//! The names are written out rather than asked of the protobuf runtime: `descriptor()` builds
//! the reflection tables of the message's whole .proto file and of everything it imports
//! (gogo.proto pulls in descriptor.proto, comments included). Measured with massif on a shim
//! serving one container: ~0.4 MiB of heap, kept for the life of the shim, which is most of
//! what a shim adds per sandbox. The tests check every name against the descriptor.

use containerd_shim_protos::cgroups::metrics as cgroups_v1;
use containerd_shim_protos::cgroups_v2::metrics as cgroups_v2;
use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskOOM, TaskPaused,
    TaskResumed, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::shim::oci::ProcessDetails;

/// A message with the fully qualified protobuf name containerd looks it up by.
pub trait Named: Message {
    const TYPE_NAME: &'static str;
}

macro_rules! named {
    ($($ty:ty => $name:literal,)*) => {
        $(impl Named for $ty {
            const TYPE_NAME: &'static str = $name;
        })*
    };
}

named! {
    TaskCreate => "containerd.events.TaskCreate",
    TaskStart => "containerd.events.TaskStart",
    TaskExit => "containerd.events.TaskExit",
    TaskOOM => "containerd.events.TaskOOM",
    TaskDelete => "containerd.events.TaskDelete",
    TaskExecAdded => "containerd.events.TaskExecAdded",
    TaskExecStarted => "containerd.events.TaskExecStarted",
    TaskPaused => "containerd.events.TaskPaused",
    TaskResumed => "containerd.events.TaskResumed",
    cgroups_v1::Metrics => "io.containerd.cgroups.v1.Metrics",
    cgroups_v2::Metrics => "io.containerd.cgroups.v2.Metrics",
    ProcessDetails => "containerd.runc.v1.ProcessDetails",
}

/// `message` encoded into an `Any` typed `M::TYPE_NAME`.
pub fn pack<M: Named>(message: &M) -> containerd_shim_protos::protobuf::Result<Any> {
    let mut any = Any::new();
    any.type_url = M::TYPE_NAME.to_string();
    any.value = message.write_to_bytes()?;
    Ok(any)
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::protobuf::MessageFull;

    fn name_matches_descriptor<M: Named + MessageFull>() {
        assert_eq!(M::TYPE_NAME, M::descriptor().full_name());
    }

    #[test]
    fn every_written_out_name_is_the_descriptors_full_name() {
        name_matches_descriptor::<TaskCreate>();
        name_matches_descriptor::<TaskStart>();
        name_matches_descriptor::<TaskExit>();
        name_matches_descriptor::<TaskOOM>();
        name_matches_descriptor::<TaskDelete>();
        name_matches_descriptor::<TaskExecAdded>();
        name_matches_descriptor::<TaskExecStarted>();
        name_matches_descriptor::<TaskPaused>();
        name_matches_descriptor::<TaskResumed>();
        name_matches_descriptor::<cgroups_v1::Metrics>();
        name_matches_descriptor::<cgroups_v2::Metrics>();
        name_matches_descriptor::<ProcessDetails>();
    }

    #[test]
    fn a_packed_message_decodes_back() {
        let mut e = TaskExit::new();
        e.container_id = "c1".into();
        e.exit_status = 3;
        let any = pack(&e).unwrap();
        assert_eq!(any.type_url, "containerd.events.TaskExit");
        let back = TaskExit::parse_from_bytes(&any.value).unwrap();
        assert_eq!(back, e);
    }
}
