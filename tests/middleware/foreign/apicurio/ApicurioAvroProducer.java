// Writes Avro the way a JVM service that has never heard of hopchain does: a plain
// KafkaProducer whose value serializer is Apicurio Registry's AvroKafkaSerializer, set up for
// Confluent's framing (magic byte 0, a 4-byte schema id, no headers).
//
//   java -cp 'LIBS/*:CLASSES' ApicurioAvroProducer BOOTSTRAP REGISTRY_V3_URL TOPIC SCHEMA COUNT
//
// SCHEMA is an Avro record schema's JSON with a string field order_id and a long field
// amount_cents; record i (from 0) is {"order_id": "o-i", "amount_cents": 1000 + i}, keyed
// "o-i". The serializer registers SCHEMA itself under the artifact TOPIC-value (Apicurio's
// TopicIdStrategy, the subject Confluent's TopicNameStrategy names). It writes the schema's
// contentId, which is the id Apicurio's Confluent-compatible API serves by default. It exits
// 0 once every record was acknowledged.

import java.util.HashMap;
import java.util.Map;

import io.apicurio.registry.serde.Default4ByteIdHandler;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import io.apicurio.registry.serde.avro.AvroSerdeConfig;
import io.apicurio.registry.serde.config.IdOption;
import io.apicurio.registry.serde.config.SerdeConfig;
import io.apicurio.registry.serde.kafka.config.KafkaSerdeConfig;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ApicurioAvroProducer {

    private ApicurioAvroProducer() {
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String registry = args[1];
        String topic = args[2];
        Schema schema = new Schema.Parser().parse(args[3]);
        int count = Integer.parseInt(args[4]);

        Map<String, Object> config = new HashMap<>();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, AvroKafkaSerializer.class);
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(SerdeConfig.REGISTRY_URL, registry);
        config.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, true);
        // Confluent's framing, spelled out rather than left to the defaults of this version.
        config.put(SerdeConfig.ID_HANDLER, Default4ByteIdHandler.class.getName());
        config.put(SerdeConfig.USE_ID, IdOption.contentId.name());
        config.put(KafkaSerdeConfig.ENABLE_HEADERS, false);
        config.put(AvroSerdeConfig.AVRO_ENCODING, AvroSerdeConfig.AVRO_ENCODING_BINARY);

        try (KafkaProducer<String, GenericRecord> producer = new KafkaProducer<>(config)) {
            for (int i = 0; i < count; i++) {
                GenericRecord order = new GenericData.Record(schema);
                order.put("order_id", "o-" + i);
                order.put("amount_cents", 1000L + i);
                producer.send(new ProducerRecord<>(topic, "o-" + i, order)).get();
            }
        }
        // The registry client's event loop may keep non-daemon threads: leave without them.
        System.exit(0);
    }
}
